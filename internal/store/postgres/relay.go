package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Relay returns the relay's operations on the outbox table t.
func (Driver) Relay(t ident.Table) store.Relay { return newRelay(t) }

// partitionExpr is the ordering partition of a row: a hash of its aggregate, or
// of its id for events that belong to no aggregate.
const partitionExpr = `mod(abs(hashtext(CASE WHEN o.aggregate_id = '' THEN o.id::text ELSE o.aggregate_type || ':' || o.aggregate_id END)::bigint), $2)`

const pending = `processed_at IS NULL AND dead_at IS NULL`

// asyncCommit, joined into the claim, turns synchronous_commit off for the
// relay's transaction: its COMMIT does not wait for the WAL flush. Only marks
// are committed so; if PostgreSQL crashes before the flush, the marks are lost
// and the events published again, which at-least-once delivery allows. It
// saves the relay a disk flush per batch.
const asyncCommit = `(SELECT set_config('synchronous_commit', 'off', true)) AS herald_async`

const claimCols = `o.id::text, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.payload::text, o.metadata::text, o.occurred_at, o.attempts, o.strikes`

// requeueSet makes a dead event pending again (Requeue, RequeueAll and the
// admin's requeues). created_at is reset too: the oldest pending age (Stats,
// the admin's Topics) counts from the requeue, not from the first insert, or a
// requeued event would make the outbox unhealthy at once. Nothing else reads
// created_at (the partitioned outbox is partitioned by occurred_at, which is
// kept).
const requeueSet = `dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = now(), created_at = now()`

// relay is store.Relay on PostgreSQL. Its files are by job: claim.go (the
// claims and the ordered sweep), batch.go (a claimed batch, which marks
// itself and keeps or forgets the position), mark.go (the marks and their
// fence), position.go (where claims start: the state machine), frontier.go
// (the epoch locks and the frontier read from pg_locks), leases.go (the
// ordering partitions' leases), waker.go (LISTEN/NOTIFY), partitions.go
// (retention by partition drop); this file: the rest (outage recovery,
// figures, dead events, cleanup) and the pieces of SQL they share.
type relay struct {
	t      ident.Table
	claims claimQueries
	marks  markQueries
	q      struct {
		recoverOutage, recoverOwned, stats, storage, dead, requeue, requeueAll, cleanup, cleanupDefault string
	}
	leases leases
	pos    *position // where claims start
}

// newRelay returns the relay of the outbox t, its statements built once.
func newRelay(t ident.Table) *relay {
	r := &relay{t: t, pos: newPosition(time.Now)}
	rep := strings.NewReplacer("{set}", requeueSet, "{async}", asyncCommit, "{t}", t.Quoted(), "{cols}", claimCols, "{pending}", pending, "{part}", partitionExpr)
	r.claims = newClaimQueries(t, rep)
	r.marks = newMarkQueries(t, rep)
	q := &r.q
	recover := `WITH u AS (UPDATE {t} AS o SET available_at = statement_timestamp()
FROM (SELECT DISTINCT * FROM unnest($2::text[], $3::text[])) AS k(topic, type)
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0
  AND o.available_at > statement_timestamp() AND o.last_failed_at >= $1
  AND o.topic = k.topic AND o.type = k.type{owned}
RETURNING 1)
SELECT count(*) FROM u`
	q.recoverOutage = rep.Replace(strings.Replace(recover, "{owned}", "", 1))
	// Only the partitions leased to $5 ($4 partitions) by the lease table,
	// under the generations it holds ($6, $7), the lease rows locked against
	// an Acquire until the statement ends.
	q.recoverOwned = rep.Replace(strings.Replace(recover, "{owned}", `
  AND `+strings.Replace(partitionExpr, "$2", "$4", 1)+` IN (SELECT l.partition FROM `+t.Derived("_leases").Quoted()+` l
    JOIN unnest($6::int[], $7::bigint[]) AS g(part, gen) ON l.partition = g.part AND l.generation = g.gen
    WHERE l.owner = $5 AND l.expires_at > statement_timestamp() FOR SHARE OF l)`, 1))
	q.stats = rep.Replace(`SELECT p.n, p.failing, (SELECT count(*) FROM {t} WHERE dead_at IS NOT NULL), p.age
FROM (SELECT count(*) AS n, count(*) FILTER (WHERE attempts > 0) AS failing,
        extract(epoch FROM now() - min(created_at)) AS age
      FROM {t} WHERE {pending}) AS p`)
	q.storage = storageSQL
	q.dead = rep.Replace(`SELECT {cols}, o.last_error, o.dead_at FROM {t} o WHERE o.dead_at IS NOT NULL ORDER BY o.dead_at, o.seq LIMIT $1`)
	q.requeue = rep.Replace(`UPDATE {t} SET {set}
WHERE id = $1::uuid AND dead_at IS NOT NULL`)
	q.requeueAll = rep.Replace(`UPDATE {t} SET {set}
WHERE dead_at IS NOT NULL`)
	cleanup := `DELETE FROM {t} WHERE id IN (
  SELECT id FROM {t} WHERE processed_at < now() - $1::float8 * interval '1 millisecond' LIMIT $2)`
	q.cleanup = rep.Replace(cleanup)
	q.cleanupDefault = strings.ReplaceAll(cleanup, "{t}", t.Derived("_default").Quoted())
	r.leases = newLeases(t, r.pos)
	return r
}

func (r *relay) Create(ctx context.Context, x store.Execer, ordered, retention bool, skip func(string, error) bool) error {
	return schema.CreateRelay(ctx, x, r.t, ordered, retention, skip)
}

func (r *relay) Check(ctx context.Context, x store.Execer, ordered, retention bool) error {
	return schema.CheckRelay(ctx, x, r.t, ordered, retention)
}

// RecoverOutage makes the recovery's retries due; with a fence (ordered
// mode) only in the partitions the fence's leases still hold, by the lease
// table: the other instances keep positions past their own waiting retries,
// and made due by another instance those would let the later events of
// their aggregates be claimed first.
func (r *relay) RecoverOutage(ctx context.Context, db store.DB, rec store.Recovery) (int64, error) {
	if f := rec.Fence; f != nil {
		parts, gens := f.Parts()
		return r.recover(ctx, db, r.q.recoverOwned, rec.Since, rec.Topics, rec.Types, f.Partitions, f.Instance, parts, gens)
	}
	return r.recover(ctx, db, r.q.recoverOutage, rec.Since, rec.Topics, rec.Types)
}

func (r *relay) recover(ctx context.Context, x store.Execer, q string, since time.Time, topics, types []string, more ...any) (int64, error) {
	var n int64
	if err := store.QueryRow(ctx, x, q, append([]any{since, topics, types}, more...), &n); err != nil {
		return 0, err
	}
	if n > 0 {
		// Retries made due long before their time: the next claims start
		// at the head (after an outage; rare).
		r.pos.rewind()
	}
	return n, nil
}

func (r *relay) Stats(ctx context.Context, x store.Execer) (store.Stats, error) {
	var (
		s   store.Stats
		age sql.NullFloat64
	)
	if err := store.QueryRow(ctx, x, r.q.stats, nil, &s.Pending, &s.Failing, &s.Dead, &age); err != nil {
		return s, err
	}
	if age.Valid {
		s.OldestPending = time.Duration(age.Float64 * float64(time.Second))
	}
	var (
		deadTuples, bytes int64
		readAll           bool
		xact              sql.NullFloat64
	)
	if err := store.QueryRow(ctx, x, r.q.storage, []any{r.t.Quoted()}, &deadTuples, &bytes, &readAll, &xact); err != nil {
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

// storageSQL reads, for the outbox ($1, summed over its partitions if it has
// any): PostgreSQL's estimate of its dead row versions and its size with
// indexes and TOAST; whether this role sees every session's transaction
// (superuser or pg_read_all_stats: others' are hidden); and the age of the
// oldest transaction holding back vacuum's horizon (a snapshot or a
// transaction id held; prepared transactions too), other than this one.
const storageSQL = `WITH rels AS (
  SELECT $1::regclass AS oid UNION ALL SELECT inhrelid FROM pg_inherits WHERE inhparent = $1::regclass)
SELECT
  (SELECT coalesce(sum(s.n_dead_tup), 0)::bigint FROM pg_stat_all_tables s WHERE s.relid IN (SELECT oid FROM rels)),
  (SELECT coalesce(sum(pg_total_relation_size(oid)), 0)::bigint FROM rels),
  (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) OR pg_has_role('pg_read_all_stats', 'USAGE'),
  greatest(0, extract(epoch FROM clock_timestamp() - (SELECT min(t) FROM (
    SELECT xact_start AS t FROM pg_stat_activity
      WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AND pid <> pg_backend_pid()
    UNION ALL SELECT prepared FROM pg_prepared_xacts) x)))::float8`

func (r *relay) Dead(ctx context.Context, x store.Execer, limit int) ([]store.Row, error) {
	return store.Collect(ctx, x, r.q.dead, []any{limit}, scanDead)
}

// Requeue makes a dead event pending again in a statement of its own, then
// forgets the positions: the event keeps its place in the order, and a claim
// that ran before the commit passed over it.
func (r *relay) Requeue(ctx context.Context, db store.DB, id string) (bool, error) {
	ok, err := r.requeue(ctx, db, id)
	if ok {
		r.pos.rewind()
	}
	return ok, err
}

// requeue requeues the dead event id in x's transaction.
func (r *relay) requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	n, err := store.Affected(ctx, x, r.q.requeue, id)
	return n > 0, err
}

// RequeueAll requeues every dead event, as Requeue does.
func (r *relay) RequeueAll(ctx context.Context, db store.DB) (int64, error) {
	n, err := store.Affected(ctx, db, r.q.requeueAll)
	if n > 0 {
		r.pos.rewind()
	}
	return n, err
}

// Cleanup deletes a batch under a transaction-scoped advisory lock keyed by the
// table's oid: one instance cleans at a time, tables of one name in other
// schemas clean apart.
func (r *relay) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return lockedDelete(ctx, db, "herald.cleanup:", r.t, r.q.cleanup, float64(olderThan.Milliseconds()), limit)
}

// scanDead reads a dead event: the claimed columns, last_error, dead_at.
func scanDead(rows *sql.Rows) (store.Row, error) {
	var (
		lastErr sql.NullString
		deadAt  time.Time
	)
	d, err := scanClaimed(rows, &lastErr, &deadAt)
	d.LastError, d.DeadAt = lastErr.String, deadAt
	return d, err
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
