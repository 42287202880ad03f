package mysql

import (
	"context"
	"database/sql"
	"math"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// statsSQL is Stats' statement of the pending, failing and dead events and
// the oldest pending age (the scheduled events' figures are
// scheduledStatsSQL's).
const statsSQL = `SELECT COUNT(*), COALESCE(SUM(attempts > 0), 0), TIMESTAMPDIFF(MICROSECOND, MIN({since}), {now}),
  (SELECT COUNT(*) FROM {t} WHERE dead_at IS NOT NULL)
FROM {t} WHERE {pending}`

func (r *relay) Stats(ctx context.Context, x store.Execer) (store.Stats, error) {
	var (
		s   store.Stats
		age sql.NullInt64
	)
	if err := sqlkit.QueryRow(ctx, x, r.stats, nil, &s.Pending, &s.Failing, &age, &s.Dead); err != nil {
		return s, err
	}
	if age.Valid {
		s.OldestPending = time.Duration(age.Int64) * time.Microsecond
	}
	if err := r.scheduledStats(ctx, x, &s); err != nil {
		return s, err
	}
	return s, nil
}

// OldestUnheld is the oldest pending age an ordered relay reports
// (sqlkit.OldestUnheld, unheldSQL).
func (r *relay) OldestUnheld(ctx context.Context, x store.Execer) (time.Duration, error) {
	via, err := r.blockersIndex(ctx, x)
	if err != nil {
		return 0, err
	}
	return sqlkit.OldestUnheld(ctx, x, r.unheld[via], int64(math.MaxInt64))
}

// unheldSQL is sqlkit.OldestUnheld's statement: of the $1 due pending
// events that have waited longest ({since}), the age of the oldest not held
// in line (behind a pending scheduled event of its aggregate), through the
// blockers index or, on an outbox made before it, the aggregate index
// (byAggregate), and how many it looked at.
const unheldSQL = `SELECT TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN NOT y.held THEN y.since END), {now}), COUNT(*)
FROM (SELECT x.since, x.aggregate_id <> '' AND EXISTS (SELECT 1 FROM {t} s{held} AND s.dead_at IS NULL
          AND s.processed_at IS NULL AND s.seq < x.seq AND s.due_at IS NOT NULL) AS held
      FROM (SELECT {since} AS since, o.aggregate_type, o.aggregate_id, o.seq FROM {t} o
            WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND (o.due_at IS NULL OR o.due_at <= {now})
            ORDER BY since LIMIT ?) x) y`

// newUnheldQueries builds unheldSQL with rep (newRelay's), by [blockers
// index] (byAggregate: a scheduled event is one the blockers index keys).
func newUnheldQueries(rep *strings.Replacer) [2]string {
	var q [2]string
	for i, held := range byAggregate("s", "x") {
		q[i] = rep.Replace(strings.Replace(unheldSQL, "{held}", held, 1))
	}
	return q
}
