package postgres

import (
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/store"
)

// NextDue's statement, which the relay runs at each wait, is planned through
// the scheduled index on a new outbox, empty or with a few events pending
// and no statistics: the plan its connection keeps then. Planned there as a
// full scan of another index filtered on due_at, it visited the heap row of
// every event published since, which a transaction holding vacuum back
// keeps.
func TestNextDuePlannedThroughTheScheduledIndex(t *testing.T) {
	t.Parallel()
	db, o, r := orderedOutbox(t)
	plan := func() string {
		t.Helper()
		rows, err := db.QueryContext(t.Context(), `EXPLAIN `+r.q().nextDue)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rows.Close() }()
		var b strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			b.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	check := func(state string) {
		t.Helper()
		p := plan()
		if !strings.Contains(p, "outbox_messages_scheduled_idx") || strings.Count(p, " Scan ") != 1 {
			t.Fatalf("NextDue's plan on %s:\n%s\nwant one scan, of outbox_messages_scheduled_idx", state, p)
		}
	}
	check("an empty outbox")
	for v := 1; v <= 5; v++ {
		insertEvent(t, db, o, v, store.Schedule{})
	}
	check("an outbox of 5 pending events")
}
