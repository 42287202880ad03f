package sqlkit

import (
	"context"

	"github.com/heraldgo/herald/internal/store"
)

// Confirm confirms the scheduled rows of an ordered claim's rows (in seq
// order; Row.Scheduled): query returns the statement, and its arguments,
// that yields the ids of the rows of sched still pending, due and not locked
// by a writer. An ordered claim reads without locks, so a Reschedule that
// deleted or moved an event just before it came due, in a transaction that
// has not ended, is not in its snapshot: the confirmation, a fresh statement
// that skips (or waits for) such a writer, is. The rows are cut before the
// first scheduled row that did not come back, so that no later event of its
// aggregate goes first. Without a scheduled row it runs nothing.
func Confirm(ctx context.Context, x store.Execer, rows []store.Row, query func(sched []store.Row) (string, []any)) ([]store.Row, error) {
	var sched []store.Row
	for _, c := range rows {
		if c.Scheduled {
			sched = append(sched, c)
		}
	}
	if len(sched) == 0 {
		return rows, nil
	}
	q, args := query(sched)
	ids, err := Column[string](ctx, x, q, args...)
	if err != nil {
		return nil, err
	}
	ok := make(map[string]bool, len(ids))
	for _, id := range ids {
		ok[id] = true
	}
	for i, c := range rows {
		if c.Scheduled && !ok[c.ID] {
			return rows[:i], nil
		}
	}
	return rows, nil
}
