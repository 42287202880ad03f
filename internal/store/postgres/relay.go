package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Relay returns the relay's operations on the outbox table t.
func (Driver) Relay(t ident.Table) store.Relay { return newRelay(t) }

// Waker returns LISTEN/NOTIFY.
func (Driver) Waker() store.Waker { return waker{} }

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

type relay struct {
	t ident.Table
	q struct {
		claimLocked, claimLeased, unlease, claimOrdered, markDelete, markProcessed, markFailed,
		recoverOutage, stats, dead, requeue, requeueAll, cleanup string
	}
	leases leases
}

func newRelay(t ident.Table) *relay {
	r := &relay{t: t}
	rep := strings.NewReplacer("{async}", asyncCommit, "{t}", t.Quoted(), "{cols}", claimCols, "{pending}", pending, "{part}", partitionExpr)
	q := &r.q
	// The pending index (available_at, id) serves this scan in order; locked
	// rows are skipped, so instances share the work.
	q.claimLocked = rep.Replace(`SELECT {cols} FROM {t} o, {async}
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
ORDER BY o.available_at, o.id LIMIT $1 FOR UPDATE OF o SKIP LOCKED`)
	q.claimLeased = rep.Replace(`UPDATE {t} AS o SET available_at = statement_timestamp() + $2::float8 * interval '1 millisecond'
WHERE o.id IN (SELECT id FROM {t} WHERE {pending} AND available_at <= statement_timestamp()
  ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING {cols}`)
	q.unlease = rep.Replace(`UPDATE {t} SET available_at = statement_timestamp() WHERE id = ANY($1::uuid[]) AND {pending}`)
	// Only this instance reads its partitions, so no row locks. An event is due
	// unless an earlier event of its aggregate waits for a retry ("blocked",
	// usually few rows). As an anti-join, not a NOT EXISTS per row: the per-row
	// subplan made the planner's estimate big enough to JIT-compile every claim
	// (200 ms each) once the backlog grew.
	q.claimOrdered = rep.Replace(`WITH blocked AS MATERIALIZED (
  SELECT aggregate_type, aggregate_id, min(seq) AS seq FROM {t}
  WHERE {pending} AND available_at > now() AND aggregate_id <> ''
  GROUP BY aggregate_type, aggregate_id)
SELECT {cols} FROM {t} o
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
  AND {part} = ANY($3::int[])
  AND NOT EXISTS (SELECT 1 FROM blocked b
    WHERE b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id AND b.seq < o.seq)
ORDER BY o.seq LIMIT $1`)
	q.markDelete = rep.Replace(`DELETE FROM {t} WHERE id = ANY($1::uuid[])`)
	q.markProcessed = rep.Replace(`UPDATE {t} SET processed_at = now(), last_error = NULL WHERE id = ANY($1::uuid[])`)
	// statement_timestamp, not now(): in a claim's transaction now() is its
	// start, before publishing, which would shorten the backoffs.
	q.markFailed = rep.Replace(`UPDATE {t} AS o SET
  attempts = o.attempts + 1,
  strikes = o.strikes + CASE WHEN u.strike THEN 1 ELSE 0 END,
  last_error = u.err,
  last_failed_at = statement_timestamp(),
  available_at = statement_timestamp() + u.delay * interval '1 microsecond',
  dead_at = CASE WHEN u.dead THEN statement_timestamp() END
FROM unnest($1::uuid[], $2::text[], $3::bool[], $4::bool[], $5::float8[]) AS u(id, err, strike, dead, delay)
WHERE o.id = u.id AND o.processed_at IS NULL AND o.dead_at IS NULL`)
	q.recoverOutage = rep.Replace(`UPDATE {t} AS o SET available_at = statement_timestamp()
FROM (SELECT DISTINCT * FROM unnest($2::text[], $3::text[])) AS k(topic, type)
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0
  AND o.available_at > statement_timestamp() AND o.last_failed_at >= $1
  AND o.topic = k.topic AND o.type = k.type`)
	q.stats = rep.Replace(`SELECT p.n, p.failing, (SELECT count(*) FROM {t} WHERE dead_at IS NOT NULL), p.age
FROM (SELECT count(*) AS n, count(*) FILTER (WHERE attempts > 0) AS failing,
        extract(epoch FROM now() - min(created_at)) AS age
      FROM {t} WHERE {pending}) AS p`)
	q.dead = rep.Replace(`SELECT {cols}, o.last_error, o.dead_at FROM {t} o WHERE o.dead_at IS NOT NULL ORDER BY o.dead_at, o.seq LIMIT $1`)
	q.requeue = rep.Replace(`UPDATE {t} SET dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = now()
WHERE id = $1::uuid AND dead_at IS NOT NULL`)
	q.requeueAll = rep.Replace(`UPDATE {t} SET dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = now()
WHERE dead_at IS NOT NULL`)
	q.cleanup = rep.Replace(`DELETE FROM {t} WHERE id IN (
  SELECT id FROM {t} WHERE processed_at < now() - $1::float8 * interval '1 millisecond' LIMIT $2)`)
	r.leases = newLeases(t)
	return r
}

func (r *relay) Create(ctx context.Context, x store.Execer, ordered, retention bool, skip func(string, error) bool) error {
	objs, err := store.Objects(Migrations(), "0002_relay.up.sql", store.DefaultOutbox, r.t, ident.Table.Quoted)
	if err != nil {
		return err
	}
	return store.CreateRelayObjects(ctx, x, objs, ordered, retention,
		func(o store.Object) (bool, error) { return exists(ctx, x, o.Name.Quoted()) }, skip)
}

func scanClaimed(rows *sql.Rows, extra ...any) (store.Claimed, error) {
	var (
		c                 store.Claimed
		payload, metadata string
	)
	dest := append([]any{&c.ID, &c.Type, &c.Version, &c.AggregateType, &c.AggregateID, &c.Topic, &payload, &metadata,
		&c.OccurredAt, &c.Attempts, &c.Strikes}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return c, err
	}
	c.Payload, c.Metadata = []byte(payload), []byte(metadata)
	return c, nil
}

func (r *relay) claim(ctx context.Context, x store.Execer, q string, args ...any) ([]store.Claimed, error) {
	rows, err := x.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []store.Claimed
	for rows.Next() {
		c, err := scanClaimed(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func (r *relay) ClaimLocked(ctx context.Context, tx store.Execer, limit int) ([]store.Claimed, error) {
	return r.claim(ctx, tx, r.q.claimLocked, limit)
}

func (r *relay) ClaimLeased(ctx context.Context, x store.Execer, limit int, lease time.Duration) ([]store.Claimed, error) {
	return r.claim(ctx, x, r.q.claimLeased, limit, float64(lease.Milliseconds()))
}

func (r *relay) Unlease(ctx context.Context, x store.Execer, ids []string) error {
	_, err := x.ExecContext(ctx, r.q.unlease, ids)
	return err
}

func (r *relay) ClaimOrdered(ctx context.Context, x store.Execer, limit, partitions int, owned []int32) ([]store.Claimed, error) {
	return r.claim(ctx, x, r.q.claimOrdered, limit, partitions, owned)
}

func (r *relay) MarkPublished(ctx context.Context, x store.Execer, ids []string, keep bool) error {
	q := r.q.markDelete
	if keep {
		q = r.q.markProcessed
	}
	_, err := x.ExecContext(ctx, q, ids)
	return err
}

func (r *relay) MarkFailed(ctx context.Context, x store.Execer, fs []store.Failure) (time.Time, error) {
	n := len(fs)
	ids, errs := make([]string, n), make([]string, n)
	strikes, dead, delays := make([]bool, n), make([]bool, n), make([]float64, n)
	for i, f := range fs {
		ids[i], errs[i], strikes[i], dead[i], delays[i] = f.ID, f.Err, f.Strike, f.Dead, float64(f.Delay.Microseconds())
	}
	// The time read first is at or before the marks' own.
	var now time.Time
	if err := queryRow(ctx, x, `SELECT statement_timestamp()`, nil, &now); err != nil {
		return now, err
	}
	_, err := x.ExecContext(ctx, r.q.markFailed, ids, errs, strikes, dead, delays)
	return now, err
}

func (r *relay) RecoverOutage(ctx context.Context, x store.Execer, since time.Time, topics, types []string) (int64, error) {
	res, err := x.ExecContext(ctx, r.q.recoverOutage, since, topics, types)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (r *relay) Stats(ctx context.Context, x store.Execer) (store.Stats, error) {
	var (
		s   store.Stats
		age sql.NullFloat64
	)
	if err := queryRow(ctx, x, r.q.stats, nil, &s.Pending, &s.Failing, &s.Dead, &age); err != nil {
		return s, err
	}
	if age.Valid {
		s.OldestPending = time.Duration(age.Float64 * float64(time.Second))
	}
	return s, nil
}

func (r *relay) Dead(ctx context.Context, x store.Execer, limit int) ([]store.DeadRow, error) {
	rows, err := x.QueryContext(ctx, r.q.dead, limit)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []store.DeadRow
	for rows.Next() {
		var (
			d       store.DeadRow
			lastErr sql.NullString
		)
		c, err := scanClaimed(rows, &lastErr, &d.DeadAt)
		if err != nil {
			return nil, err
		}
		d.Claimed, d.LastError = c, lastErr.String
		out = append(out, d)
	}
	return out, rows.Err()
}

func (r *relay) Requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	res, err := x.ExecContext(ctx, r.q.requeue, id)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

func (r *relay) RequeueAll(ctx context.Context, x store.Execer) (int64, error) {
	res, err := x.ExecContext(ctx, r.q.requeueAll)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Cleanup deletes a batch under a transaction-scoped advisory lock keyed by the
// table's oid: one instance cleans at a time, tables of one name in other
// schemas clean apart.
func (r *relay) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return lockedDelete(ctx, db, "herald.cleanup:", r.t, r.q.cleanup, float64(olderThan.Milliseconds()), limit)
}

func (r *relay) Leases() store.Leases { return r.leases }

// queryRow scans the one row q returns into dest.
func queryRow(ctx context.Context, x store.Execer, q string, args []any, dest ...any) error {
	rows, err := x.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

type leases struct {
	seed, heartbeat, live, renew, release, acquire, releaseAll, leave string
}

func newLeases(t ident.Table) leases {
	lt, rt := t.Derived("_leases").Quoted(), t.Derived("_relays").Quoted()
	return leases{
		seed: `INSERT INTO ` + lt + ` (partition) SELECT generate_series(0, $1 - 1) ON CONFLICT DO NOTHING`,
		heartbeat: `INSERT INTO ` + rt + ` (instance, seen_at) VALUES ($1, now())
ON CONFLICT (instance) DO UPDATE SET seen_at = now()`,
		live: `SELECT count(*) FROM ` + rt + ` WHERE seen_at > now() - $1::float8 * interval '1 millisecond'`,
		renew: `UPDATE ` + lt + ` SET expires_at = now() + $2::float8 * interval '1 millisecond'
WHERE owner = $1 AND expires_at > now() RETURNING partition`,
		release: `UPDATE ` + lt + ` SET owner = '', expires_at = '-infinity' WHERE owner = $1 AND partition = ANY($2::int[])`,
		acquire: `UPDATE ` + lt + ` SET owner = $1, expires_at = now() + $2::float8 * interval '1 millisecond'
WHERE partition IN (SELECT partition FROM ` + lt + ` WHERE expires_at <= now() AND partition < $4
  ORDER BY partition LIMIT $3 FOR UPDATE SKIP LOCKED)
RETURNING partition`,
		releaseAll: `UPDATE ` + lt + ` SET owner = '', expires_at = '-infinity' WHERE owner = $1`,
		leave:      `DELETE FROM ` + rt + ` WHERE instance = $1`,
	}
}

func ms(d time.Duration) float64 { return float64(d.Milliseconds()) }

func (l leases) Seed(ctx context.Context, x store.Execer, n int) error {
	_, err := x.ExecContext(ctx, l.seed, n)
	return err
}

func (l leases) Heartbeat(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, l.heartbeat, instance)
	return err
}

func (l leases) Live(ctx context.Context, x store.Execer, within time.Duration) (int, error) {
	var n int
	err := queryRow(ctx, x, l.live, []any{ms(within)}, &n)
	return n, err
}

func (l leases) Renew(ctx context.Context, x store.Execer, instance string, lease time.Duration) ([]int, error) {
	return store.QueryInts(ctx, x, l.renew, instance, ms(lease))
}

func (l leases) Release(ctx context.Context, x store.Execer, instance string, parts []int) error {
	_, err := x.ExecContext(ctx, l.release, instance, parts)
	return err
}

func (l leases) Acquire(ctx context.Context, db store.DB, instance string, lease time.Duration, n, partitions int) ([]int, error) {
	return store.QueryInts(ctx, db, l.acquire, instance, ms(lease), n, partitions)
}

func (l leases) ReleaseAll(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, l.releaseAll, instance)
	return err
}

func (l leases) Leave(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, l.leave, instance)
	return err
}

type waker struct{}

// Listen takes a connection from db, LISTENs on channel and calls wake for
// each notification (and once on start, for what was committed meanwhile),
// until ctx is done or the connection fails. The session stays in LISTEN, so
// the connection is never given back to the pool.
func (waker) Listen(ctx context.Context, db *sql.DB, channel string, wake func()) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}()
	// Quoted: LISTEN folds an unquoted name to lower case, pg_notify does not.
	if _, err := conn.ExecContext(ctx, `LISTEN `+ident.Name(channel).Quoted()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	wake()
	return conn.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("listen: driver connection is %T, not pgx", dc)
		}
		for {
			if _, err := pc.Conn().WaitForNotification(ctx); err != nil {
				return err
			}
			wake()
		}
	})
}

// Notify sends pg_notify(channel) from a connection of db, outside any
// writer's transaction.
func (waker) Notify(ctx context.Context, db *sql.DB, channel string) error {
	_, err := db.ExecContext(ctx, `SELECT pg_notify($1, '')`, channel)
	return err
}
