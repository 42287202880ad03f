package sqlkit

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// Confirm confirms the scheduled rows of an ordered claim's rows (in seq
// order; Row.Scheduled): query returns the statement, and its arguments,
// that yields the ids of the rows of sched still pending, due and not locked
// by a writer. An ordered claim reads without locks, so a Reschedule that
// deleted or moved an event just before it came due, in a transaction that
// has not ended, is not in its snapshot: the confirmation, a fresh statement
// that skips (or waits for) such a writer, is. A scheduled row that did not
// come back is left out with every later row of its aggregate (the same
// aggregate type and id, as the ordered claims keep order: an event of no
// aggregate holds nothing back), so that none goes first; the other
// aggregates' rows are kept. The rows left out are pending still: the next
// claim reads them again (a driver that keeps a claim position lowers it to
// them, as to any row claimed and neither published nor failed). Without a
// scheduled row it runs nothing.
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
	return Hold(rows, func(c store.Row) bool { return c.Scheduled && !ok[c.ID] }), nil
}

// aggregateKey is an aggregate's place in an ordered claim's order.
type aggregateKey struct{ typ, id string }

// Hold returns rows (in seq order) without those that held says to hold
// back, nor any later row of the same aggregate (type and id; a row of no
// aggregate, AggregateID "", holds back only itself). It returns rows itself
// when it holds nothing back.
func Hold(rows []store.Row, held func(store.Row) bool) []store.Row {
	var (
		out  []store.Row
		line map[aggregateKey]bool
		cut  bool
	)
	for i, c := range rows {
		k := aggregateKey{c.AggregateType, c.AggregateID}
		switch {
		case c.AggregateID != "" && line[k]:
		case held(c):
			if c.AggregateID != "" {
				if line == nil {
					line = map[aggregateKey]bool{}
				}
				line[k] = true
			}
		default:
			if cut {
				out = append(out, c)
			}
			continue
		}
		if !cut {
			out = append(make([]store.Row, 0, len(rows)-1), rows[:i]...)
			cut = true
		}
	}
	if !cut {
		return rows
	}
	return out
}

// UnheldLimits are how many of the oldest due pending events OldestUnheld
// looks at, in turn, while all it looked at were held.
var UnheldLimits = []int{256, 8192}

// OldestUnheld is the oldest pending age an ordered relay reports
// (store.Relay.OldestUnheld): that of the oldest pending event that is due
// and not held in line, that is with no pending scheduled event of its
// aggregate before it (a scheduled event of no aggregate, apart, holds
// nothing). Until such a scheduled event is due the events behind it wait
// by design; once it is, it is counted itself, from its due time, which is
// no later than the time from which any of them waits late, so leaving
// them out never hides a late line. q yields, over the limit ($1) oldest
// due pending events, the age of the oldest not held, in microseconds, or
// NULL, and how many it looked at. It looks at UnheldLimits' first, then,
// while all it looked at were held, at more, and at last at every due
// pending event (all: the limit that takes them all). Each look is one
// scan of the pending events with a bounded sort of the due ones, as
// Stats', and one look-up in the aggregate index per event looked at.
func OldestUnheld(ctx context.Context, x store.Execer, q string, all any) (time.Duration, error) {
	limits := make([]any, 0, len(UnheldLimits)+1)
	for _, n := range UnheldLimits {
		limits = append(limits, n)
	}
	limits = append(limits, all)
	for i, limit := range limits {
		var (
			age sql.NullInt64
			n   int64
		)
		if err := QueryRow(ctx, x, q, []any{limit}, &age, &n); err != nil {
			return 0, fmt.Errorf("oldest pending age not held in line: %w", err)
		}
		if age.Valid || i == len(UnheldLimits) || n < int64(UnheldLimits[i]) {
			return time.Duration(age.Int64) * time.Microsecond, nil
		}
	}
	return 0, nil
}
