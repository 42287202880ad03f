package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// Stats counts pending, failing, dead and scheduled events, with the oldest
// pending age and the scheduled events' next and overdue times, in one
// statement (one clock).
func (r *relay) Stats(ctx context.Context, x store.Execer) (store.Stats, error) {
	var (
		s                  store.Stats
		age, next, overdue sql.NullInt64
	)
	rows, err := x.QueryContext(ctx, r.q.stats)
	if err != nil {
		return s, err
	}
	defer func() { _ = rows.Close() }()
	if rows.Next() {
		if err := rows.Scan(&s.Pending, &s.Failing, &age, &s.Dead, &s.Scheduled, &next, &overdue); err != nil {
			return s, err
		}
	}
	s.OldestPending, s.NextScheduled, s.Overdue = micros(age), micros(next), micros(overdue)
	return s, rows.Err()
}

// micros is the microseconds us as a duration, 0 for NULL.
func micros(us sql.NullInt64) time.Duration {
	return time.Duration(us.Int64) * time.Microsecond
}
