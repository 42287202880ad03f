package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// Due times are the database's: a relay whose clock is minutes off (fast or
// slow) neither claims a scheduled event before it is due nor later than the
// first claim after, in either mode, and its wait until the next due time
// comes from the database too.
func TestScheduledEventsIgnoreTheRelaysClock(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		for _, ordered := range []bool{false, true} {
			t.Run(fmt.Sprintf("skew %v ordered %v", skew, ordered), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				db, o, r := orderedOutbox(t)
				r.pos.now = func() time.Time { return time.Now().Add(skew) }
				claim := func() []store.Row {
					t.Helper()
					if ordered {
						rows, err := r.claimOrdered(ctx, db, 10, 1, []int32{0}, nil)
						if err != nil {
							t.Fatal(err)
						}
						for _, c := range rows { // published: the position moves on
							r.pos.published([]string{c.ID})
						}
						return rows
					}
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer func() { _ = tx.Rollback() }()
					rows, err := r.claimLocked(ctx, tx, 10, false)
					if err != nil {
						t.Fatal(err)
					}
					if len(rows) > 0 {
						if _, err := tx.ExecContext(ctx, `DELETE FROM outbox_messages WHERE id = $1`, rows[0].ID); err != nil {
							t.Fatal(err)
						}
					}
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
					return rows
				}
				id := insertEvent(t, db, o, 1, store.Schedule{After: 1500 * time.Millisecond})
				wait, ok, err := r.NextDue(ctx, db)
				if err != nil || !ok || wait <= 0 || wait > 1500*time.Millisecond {
					t.Fatalf("NextDue = %v, %v, %v: want under 1.5 s whatever the relay's clock", wait, ok, err)
				}
				deadline := time.Now().Add(wait)
				for time.Now().Before(deadline.Add(-50 * time.Millisecond)) {
					if got := claim(); len(got) != 0 {
						t.Fatalf("claimed %d events %v before the due time", len(got), time.Until(deadline))
					}
					time.Sleep(100 * time.Millisecond)
				}
				time.Sleep(time.Until(deadline) + 10*time.Millisecond)
				if got := claim(); len(got) != 1 || got[0].ID != id {
					t.Fatalf("the first claim after the due time took %d events", len(got))
				}
			})
		}
	}
}
