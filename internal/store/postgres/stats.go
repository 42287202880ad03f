package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

func (r *relay) Stats(ctx context.Context, x store.Execer) (store.Stats, error) {
	var (
		s   store.Stats
		age sql.NullFloat64
	)
	if err := sqlkit.QueryRow(ctx, x, r.q().stats, nil, &s.Pending, &s.Failing, &s.Dead, &age); err != nil {
		return s, err
	}
	if age.Valid {
		s.OldestPending = time.Duration(age.Float64 * float64(time.Second))
	}
	var next, overdue float64
	if err := sqlkit.QueryRow(ctx, x, r.q().scheduled, nil, &s.Scheduled, &next, &overdue); err != nil {
		return s, fmt.Errorf("scheduled figures: %w", err)
	}
	s.NextScheduled, s.Overdue = seconds(next), seconds(overdue)
	var (
		deadTuples, bytes int64
		readAll           bool
		xact              sql.NullFloat64
	)
	if err := sqlkit.QueryRow(ctx, x, r.q().storage, []any{r.t.Quoted()}, &deadTuples, &bytes, &readAll, &xact); err != nil {
		return s, fmt.Errorf("storage figures: %w", err)
	}
	s.Storage = true
	s.DeadTuples, s.TableBytes = deadTuples, bytes
	if readAll {
		s.OldestXactKnown = true
		if xact.Valid {
			s.OldestXact = time.Duration(xact.Float64 * float64(time.Second))
		}
	}
	return s, nil
}

// OldestUnheld is the oldest pending age an ordered relay reports
// (sqlkit.OldestUnheld, unheldSQL).
func (r *relay) OldestUnheld(ctx context.Context, x store.Execer) (time.Duration, error) {
	return sqlkit.OldestUnheld(ctx, x, r.q().unheld, nil)
}

// unheldSQL is sqlkit.OldestUnheld's statement: of the $1 due pending
// events that have waited longest ({since}), the age of the oldest not held
// in line (behind a pending scheduled event of its aggregate), through the
// aggregate index, and how many it looked at.
const unheldSQL = `SELECT (extract(epoch FROM now() - min(y.since) FILTER (WHERE NOT y.held)) * 1000000)::bigint, count(*)
FROM (SELECT x.since, x.aggregate_id <> '' AND EXISTS (SELECT 1 FROM {t} s
        WHERE s.aggregate_type = x.aggregate_type AND s.aggregate_id = x.aggregate_id AND s.seq < x.seq
          AND s.processed_at IS NULL AND s.dead_at IS NULL AND s.due_at IS NOT NULL) AS held
      FROM (SELECT {since} AS since, o.aggregate_type, o.aggregate_id, o.seq FROM {t} o
            WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND (o.due_at IS NULL OR o.due_at <= now())
            ORDER BY 1 LIMIT $1) x) y`

// storageSQL reads, for the outbox ($1, summed over its partitions if it has
// any): PostgreSQL's estimate of its dead row versions (what
// pg_stat_all_tables.n_dead_tup reads, without the view, which computes the
// row of every table first: 15 ms a call among 10,000 tables) and its size with
// indexes and TOAST; whether this role sees every session's transaction
// (superuser or pg_read_all_stats: others' are hidden); and the age of the
// oldest transaction holding back vacuum's horizon (a snapshot or a
// transaction id held; prepared transactions too), other than this one.
const storageSQL = `WITH rels AS (
  SELECT $1::regclass AS oid UNION ALL SELECT inhrelid FROM pg_inherits WHERE inhparent = $1::regclass)
SELECT
  (SELECT coalesce(sum(pg_stat_get_dead_tuples(oid)), 0)::bigint FROM rels),
  (SELECT coalesce(sum(pg_total_relation_size(oid)), 0)::bigint FROM rels),
  (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) OR pg_has_role('pg_read_all_stats', 'USAGE'),
  greatest(0, extract(epoch FROM clock_timestamp() - (SELECT min(t) FROM (
    SELECT xact_start AS t FROM pg_stat_activity
      WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AND pid <> pg_backend_pid()
    UNION ALL SELECT prepared FROM pg_prepared_xacts) x)))::float8`

// seconds converts a number of seconds the database computed.
func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
