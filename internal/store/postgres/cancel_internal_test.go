package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// An event scheduled in line holds its aggregate's later events back, and a
// full claim moves the position past them; when the scheduled event is then
// cancelled, nothing brings the position back to them. A later event of the
// aggregate, above the position, must not go first (the chaos run's order
// violation): the events below the start hold it back, and the claim starts
// at the first of them next.
func TestOrderedClaimAfterACancelledBlocker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, o, r := orderedOutbox(t)
	insert := func(s store.Schedule) string { return insertEvent(t, db, o, 1, s) }
	claim := func(limit int) []string {
		t.Helper()
		time.Sleep(frontierEvery + time.Millisecond) // each claim reads the frontier
		rows, err := r.claimOrdered(ctx, db, limit, 1, []int32{0}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(rows))
		for i, c := range rows {
			ids[i] = c.ID
		}
		r.pos.published(ids)
		if _, err := db.ExecContext(ctx, `DELETE FROM outbox_messages WHERE id = ANY($1::uuid[])`, ids); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	sched := insert(store.Schedule{After: time.Hour})
	v2, v3 := insert(store.Schedule{}), insert(store.Schedule{})
	if got := claim(2); len(got) != 0 {
		t.Fatalf("claimed %v behind the event scheduled in line", got)
	}
	for range 3 { // the position moves past them, full claims of nothing
		claim(2)
	}
	res, err := o.Reschedule(ctx, db, store.RescheduleParams{ID: sched, Cancel: true})
	if err != nil || res.Changed != 1 {
		t.Fatalf("cancel = %+v, %v", res, err)
	}
	v4 := insert(store.Schedule{})
	var got []string
	for range 3 {
		got = append(got, claim(10)...)
	}
	want := []string{v2, v3, v4}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("claimed %v after the cancel, want %v", got, want)
	}
}
