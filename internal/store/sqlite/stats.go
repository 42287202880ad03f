package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Stats counts pending, failing, dead and scheduled events, with the oldest
// pending age and the scheduled events' next and overdue times, in one
// statement (one clock).
func (r *relay) Stats(ctx context.Context, x store.Execer) (store.Stats, error) {
	var (
		s                  store.Stats
		age, next, overdue sql.NullInt64
	)
	rows, err := x.QueryContext(ctx, r.stats)
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

// statsSQL is Stats' statement. The scheduled events' figures go through the
// scheduled index (due_at, of the pending scheduled rows): their count, the
// earliest not due yet, the earliest due.
const statsSQL = `SELECT count(*), coalesce(sum(attempts > 0), 0), {now} - min({since}),
  (SELECT count(*) FROM {t} WHERE dead_at IS NOT NULL),
  (SELECT count(*) FROM {t} WHERE due_at IS NOT NULL AND {pending}),
  (SELECT min(due_at) - {now} FROM {t} WHERE due_at > {now} AND {pending}),
  (SELECT {now} - min(due_at) FROM {t} WHERE due_at IS NOT NULL AND due_at <= {now} AND {pending})
FROM {t} WHERE {pending}`

// micros is the microseconds us as a duration, 0 for NULL.
func micros(us sql.NullInt64) time.Duration {
	return time.Duration(us.Int64) * time.Microsecond
}

// OldestUnheld is the oldest pending age an ordered relay reports
// (sqlkit.OldestUnheld, unheldSQL).
func (r *relay) OldestUnheld(ctx context.Context, x store.Execer) (time.Duration, error) {
	return sqlkit.OldestUnheld(ctx, x, r.unheld, -1)
}

// unheldSQL is sqlkit.OldestUnheld's statement: of the first due pending
// events that have waited longest ({since}), the age of the oldest not held
// in line (behind a pending scheduled event of its aggregate), through the
// blockers index ({blocker}), and how many it looked at.
const unheldSQL = `SELECT {now} - min(CASE WHEN NOT y.held THEN y.since END), count(*)
FROM (SELECT x.since, x.aggregate_id <> '' AND EXISTS (SELECT 1 FROM {t} b
        WHERE b.aggregate_type = x.aggregate_type AND b.aggregate_id = x.aggregate_id AND b.seq < x.seq
          AND b.processed_at IS NULL AND b.dead_at IS NULL AND {blocker} AND b.due_at IS NOT NULL) AS held
      FROM (SELECT {since} AS since, o.aggregate_type, o.aggregate_id, o.seq FROM {t} o
            WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND (o.due_at IS NULL OR o.due_at <= {now})
            ORDER BY 1 LIMIT ?) x) y`
