package outboxhook

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"

	"gorm.io/gorm"
)

// aggregateLockKey is the 64-bit key of the lock that serializes the writers
// of one aggregate's events.
func aggregateLockKey(aggType, aggID string) int64 {
	h := fnv.New64a()
	h.Write([]byte("herald:aggregate:"))
	h.Write([]byte(aggType))
	h.Write([]byte{0})
	h.Write([]byte(aggID))
	return int64(h.Sum64())
}

// lockAggregates takes, in the transaction pool runs, the locks of keys (in
// ascending order, so that two statements never wait for each other in a
// cycle), held until it ends: a second transaction writing events of one of
// these aggregates waits for this one to end, so that its events are inserted,
// and numbered, after this one's committed. Per aggregate, insertion order is
// then commit order, which the ordered relay publishes in.
func (p *Plugin) lockAggregates(ctx context.Context, pool gorm.ConnPool, keys []int64) error {
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var err error
	if len(keys) == 1 {
		_, err = pool.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, keys[0])
	} else {
		_, err = pool.ExecContext(ctx, `SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::bigint[]) WITH ORDINALITY AS u(k, n)`, keys)
	}
	if err != nil {
		return fmt.Errorf("outboxhook: lock aggregates: %w", err)
	}
	return nil
}

// abortUnobserved puts the PostgreSQL transaction db runs in into the failed
// state: its COMMIT then rolls back.
func (p *Plugin) abortUnobserved(db *gorm.DB) {
	_, _ = db.Statement.ConnPool.ExecContext(context.WithoutCancel(db.Statement.Context),
		`DO $$BEGIN RAISE EXCEPTION 'herald: an outbox write of this transaction failed; roll it back'; END$$`)
}

// queryStatus asks PostgreSQL whether each transaction in xids committed.
func queryStatus(ctx context.Context, pool gorm.ConnPool, xids []int64) (map[int64]string, error) {
	rows, err := pool.QueryContext(ctx,
		`SELECT x, pg_xact_status(x::text::xid8) FROM unnest($1::bigint[]) AS x`, xids)
	if err != nil {
		return nil, fmt.Errorf("outboxhook: check status of earlier writes: %w", err)
	}
	defer rows.Close()
	status := make(map[int64]string, len(xids))
	for rows.Next() {
		var (
			x int64
			s *string
		)
		if err := rows.Scan(&x, &s); err != nil {
			return nil, fmt.Errorf("outboxhook: check status of earlier writes: %w", err)
		}
		if s != nil {
			status[x] = *s
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outboxhook: check status of earlier writes: %w", err)
	}
	return status, nil
}
