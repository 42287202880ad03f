package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Relay returns the relay's operations on the outbox table t.
func (Driver) Relay(t ident.Table) store.Relay { return newRelay(t) }

// Waker returns store.NoWaker: MySQL has no LISTEN/NOTIFY. Relays in other
// processes find events by polling (Config.PollInterval); within one process,
// Notify is a relay's Wake.
func (Driver) Waker() store.Waker { return store.NoWaker{} }

// WALOutbox returns store.ErrNotSupported: the outbox is a table here.
func (Driver) WALOutbox(string) (store.Outbox, error) { return nil, store.ErrNotSupported }

// WAL returns nil: the outbox is a table here.
func (Driver) WAL() store.WAL { return nil }

const pending = `processed_at IS NULL AND dead_at IS NULL`

const claimCols = `o.seq, o.id, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.payload, o.metadata, o.occurred_at, o.attempts, o.strikes`

// partitionExpr is the ordering partition of a row: a CRC-32 of its
// aggregate, or of its id for events that belong to no aggregate.
const partitionExpr = `MOD(CRC32(CASE WHEN o.aggregate_id = '' THEN o.id ELSE CONCAT(o.aggregate_type, ':', o.aggregate_id) END), ?)`

// bySeq joins rows by primary key from seqs (a JSON array, one placeholder),
// in that order: with "WHERE seq IN (...)" the optimizer scans the whole
// table when it is small (as an outbox mostly is), which in REPEATABLE READ
// locks every row it reads, those other relays claimed too: their marks
// deadlocked, and the batch rolled back was published again; and a DELETE
// that scans waits for every row others locked, even at READ COMMITTED. By
// the primary key, a statement touches the clustered rows directly (by the
// id key, it read that index first: a fifth slower burn-down); a list of
// UNION ALL selects costs more to parse than the JSON. The primary key is
// forced: a statement's own condition on dead_at (a purge's "dead before")
// otherwise lets the optimizer range-check the queue index per row, whose
// scan of the dead rows ends on the first pending one, which a relay's batch
// holds locked.
const bySeq = `JSON_TABLE(?, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS k STRAIGHT_JOIN {t} AS o FORCE INDEX (PRIMARY) ON o.seq = k.seq`

// requeueSet makes a dead event pending again (Requeue, RequeueAll and the
// admin's requeues). created_at is reset too: the oldest pending age (Stats,
// the admin's Topics) counts from the requeue, not from the first insert, or a
// requeued event would make the outbox unhealthy at once. Nothing else reads
// created_at (the partitioned outbox is partitioned by occurred_at, which is
// kept).
const requeueSet = `dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = ` + Now + `, created_at = ` + Now

type relay struct {
	store.Unpositioned // no claim position, no partitions
	t                  ident.Table
	q                  struct {
		claimLocked, claimOrdered, stats, dead, seqOf, requeue, deadSeqs, requeueSeqs, cleanup, fenceHeld string
		// by fencing: [none, the partition leases]
		markProcessed, markDelete, markFailed, recoverOutage [2]string
	}
	leases leases
}

func newRelay(t ident.Table) *relay {
	r := &relay{t: t}
	rep := strings.NewReplacer("{set}", requeueSet, "{t}", Quote(t), "{cols}", claimCols, "{pending}", pending, "{now}", Now, "{part}", partitionExpr,
		"{leases}", Quote(t.Derived("_leases")))
	q := &r.q
	// The queue index (dead_at DESC, processed_at DESC, available_at, seq;
	// 0006_queue_index: on tables made before it, 0001's pending index, the
	// same without DESC) serves the scan in order; locked rows are skipped,
	// so instances share the work. A claim that takes every due event keeps
	// the lock on the index entry after them until the batch ends: in the
	// queue index an event not yet due (or none), in the pending index a
	// processed or dead row, whose cleanup, purge or requeue then waits.
	q.claimLocked = rep.Replace(`SELECT {cols} FROM {t} o
WHERE o.dead_at IS NULL AND o.processed_at IS NULL AND o.available_at <= {now}
ORDER BY o.available_at, o.seq LIMIT ? FOR UPDATE SKIP LOCKED`)
	q.claimOrdered = rep.Replace(`WITH blocked AS (
  SELECT aggregate_type, aggregate_id, MIN(seq) AS seq FROM {t}
  WHERE {pending} AND available_at > {now} AND aggregate_id <> ''
  GROUP BY aggregate_type, aggregate_id)
SELECT {cols} FROM {t} o
WHERE o.dead_at IS NULL AND o.processed_at IS NULL AND o.available_at <= {now}
  AND {part} IN ({owned})
  AND NOT EXISTS (SELECT 1 FROM blocked b
    WHERE b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id AND b.seq < o.seq)
ORDER BY o.seq LIMIT ?`)
	// In ordered mode the marks are fenced. First fenceHeld share-locks the
	// batch's leases that are still this instance's ($owner) under the
	// generation the batch holds (the fence, [partition, generation] pairs):
	// a locking read, of the newest committed version at REPEATABLE READ and
	// READ COMMITTED alike, held until the marks commit, so no Acquire takes
	// those partitions before. With every lease held the plain marks follow
	// (nothing can change under them); with one lost, the fenced marks join
	// each row to its partition's lease the same way, and change only the
	// rows of the partitions still held.
	const fenced = ` STRAIGHT_JOIN {leases} AS l ON l.` + "`partition`" + ` = {part} AND l.owner = ?
STRAIGHT_JOIN JSON_TABLE(?, '$[*]' COLUMNS (p INT PATH '$[0]', g BIGINT PATH '$[1]')) AS f ON f.p = l.` + "`partition`" + ` AND f.g = l.generation`
	q.fenceHeld = rep.Replace(`SELECT COUNT(*) FROM {leases} AS l
JOIN JSON_TABLE(?, '$[*]' COLUMNS (p INT PATH '$[0]', g BIGINT PATH '$[1]')) AS f ON f.p = l.` + "`partition`" + ` AND f.g = l.generation
WHERE l.owner = ? LOCK IN SHARE MODE`)
	for i, join := range [2]string{``, fenced} {
		q.markDelete[i] = rep.Replace(`DELETE o FROM ` + bySeq + join)
		q.markProcessed[i] = rep.Replace(`UPDATE ` + bySeq + join + ` SET o.processed_at = {now}, o.last_error = NULL`)
		q.markFailed[i] = rep.Replace(`UPDATE {t} AS o` + join + ` SET
  o.attempts = o.attempts + 1,
  o.strikes = o.strikes + ?,
  o.last_error = ?,
  o.last_failed_at = {now},
  o.available_at = {now} + INTERVAL ? MICROSECOND,
  o.dead_at = CASE WHEN ? THEN {now} END
WHERE o.id = ? AND o.processed_at IS NULL AND o.dead_at IS NULL`)
	}
	for i, join := range [2]string{``, fenced} {
		q.recoverOutage[i] = rep.Replace(`UPDATE {t} AS o` + join + ` SET o.available_at = {now}
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0 AND o.available_at > {now}
  AND o.last_failed_at >= ? AND o.topic = ? AND o.type = ?`)
	}
	q.stats = rep.Replace(`SELECT COUNT(*), COALESCE(SUM(attempts > 0), 0), TIMESTAMPDIFF(MICROSECOND, MIN(created_at), {now}),
  (SELECT COUNT(*) FROM {t} WHERE dead_at IS NOT NULL)
FROM {t} WHERE {pending}`)
	q.dead = rep.Replace(`SELECT {cols}, o.last_error, o.dead_at FROM {t} o WHERE o.dead_at IS NOT NULL ORDER BY o.dead_at, o.seq LIMIT ?`)
	// By the primary key, found first by a read that locks nothing: by the id
	// key the UPDATE locks the id's entry, then waits for the row a relay's
	// claim locked, whose mark then waits for that entry (a deadlock). Only a
	// dead row is found: an UPDATE by the primary key waits for a pending row
	// a relay holds claimed even where it would not change it.
	q.seqOf = rep.Replace(`SELECT seq FROM {t} WHERE id = ? AND dead_at IS NOT NULL`)
	q.requeue = rep.Replace(`UPDATE {t} SET {set}
WHERE seq = ? AND dead_at IS NOT NULL`)
	// Every dead row, found so too: an UPDATE over the dead rows of the
	// queue index (0006_queue_index) reads, to know it is done, the first
	// entry after them, a pending event that a relay's batch may hold locked.
	q.deadSeqs = rep.Replace(`SELECT seq FROM {t} WHERE dead_at IS NOT NULL ORDER BY seq`)
	q.requeueSeqs = rep.Replace(`UPDATE ` + bySeq + ` SET {set} WHERE o.dead_at IS NOT NULL`)
	q.cleanup = rep.Replace(`DELETE FROM {t} WHERE processed_at < {now} - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?`)
	r.leases = newLeases(t)
	return r
}

func (r *relay) Create(ctx context.Context, x store.Execer, ordered, retention bool, skip func(string, error) bool) error {
	return schema.CreateRelay(ctx, x, r.t, ordered, retention, skip)
}

func (r *relay) Check(ctx context.Context, x store.Execer, ordered, retention bool) error {
	return schema.CheckRelay(ctx, x, r.t, ordered, retention)
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// parseTime reads a DATETIME(6) whether the DSN has parseTime or not.
func parseTime(v any) (time.Time, error) {
	switch t := v.(type) {
	case time.Time:
		return t.UTC(), nil
	case []byte:
		return time.ParseInLocation("2006-01-02 15:04:05.999999", string(t), time.UTC)
	case string:
		return time.ParseInLocation("2006-01-02 15:04:05.999999", t, time.UTC)
	case nil:
		return time.Time{}, nil
	}
	return time.Time{}, fmt.Errorf("mysql: time of type %T", v)
}

func scanClaimed(rows *sql.Rows, extra ...any) (store.Row, error) {
	var (
		c                 store.Row
		payload, metadata []byte
		occurred          any
	)
	dest := append([]any{&c.Seq, &c.ID, &c.Type, &c.Version, &c.AggregateType, &c.AggregateID, &c.Topic, &payload, &metadata,
		&occurred, &c.Attempts, &c.Strikes}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return c, err
	}
	c.Payload, c.Metadata = payload, metadata
	var err error
	c.OccurredAt, err = parseTime(occurred)
	return c, err
}

func (r *relay) claim(ctx context.Context, x store.Execer, q string, args ...any) ([]store.Row, error) {
	return store.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Row, error) { return scanClaimed(rows) })
}

// claimLocked claims up to limit due events in tx, locking them and skipping
// rows others locked; the locks hold until tx ends.
func (r *relay) claimLocked(ctx context.Context, tx store.Execer, limit int) ([]store.Row, error) {
	return r.claim(ctx, tx, r.q.claimLocked, limit)
}

// claimOrdered returns up to limit due events of the owned partitions, in
// insertion order, leaving out those behind an earlier event of their
// aggregate that waits for a retry. It locks nothing.
func (r *relay) claimOrdered(ctx context.Context, x store.Execer, limit, partitions int, owned []int32) ([]store.Row, error) {
	if len(owned) == 0 {
		return nil, nil
	}
	q := strings.Replace(r.q.claimOrdered, "{owned}", placeholders(len(owned)), 1)
	args := append(append([]any{partitions}, anys(owned)...), limit)
	return r.claim(ctx, x, q, args...)
}

// MarkPublished deletes published events, or with keep stamps them
// processed; with a fence, a row only while its partition's lease is the
// fence's (else ErrLeaseLost, after marking the rows of the partitions still
// held).
func (r *relay) MarkPublished(ctx context.Context, x store.Execer, keys []store.Key, keep bool, fence *store.Fence) error {
	q := r.q.markDelete
	if keep {
		q = r.q.markProcessed
	}
	if fence == nil || len(keys) == 0 {
		return store.ExecSeqs(ctx, x, q[0], keys)
	}
	// Every lease held, and share-locked until the marks commit: no
	// take-over can come between, and the plain mark is fenced as it is.
	lost := r.held(ctx, x, fence)
	if lost == nil {
		return store.ExecSeqs(ctx, x, q[0], keys)
	}
	if !errors.Is(lost, store.ErrLeaseLost) {
		return lost
	}
	seqs, err := store.SeqsJSON(keys)
	if err != nil {
		return err
	}
	if _, err := x.ExecContext(ctx, q[1], seqs, fence.Partitions, fence.Instance, fence.JSON()); err != nil {
		return err
	}
	return lost
}

// held counts the fence's leases still held, share-locking them until the
// transaction ends (a locking read sees the newest version, at any
// isolation; Acquire skips locked rows), and returns store.ErrLeaseLost when
// some is not.
func (r *relay) held(ctx context.Context, x store.Execer, fence *store.Fence) error {
	var n int
	if err := store.QueryRow(ctx, x, r.q.fenceHeld, []any{fence.JSON(), fence.Instance}, &n); err != nil {
		return err
	}
	return store.CheckFence(fence, n)
}

// MarkFailed records failures, fenced as MarkPublished is, and returns the
// database's time of the marks. It updates each row: failures are few next to
// publishes.
func (r *relay) MarkFailed(ctx context.Context, x store.Execer, fs []store.Failure, fence *store.Fence) (time.Time, error) {
	// The time read first is at or before the marks' own.
	var raw any
	if err := store.QueryRow(ctx, x, `SELECT `+Now, nil, &raw); err != nil {
		return time.Time{}, err
	}
	now, err := parseTime(raw)
	if err != nil {
		return now, err
	}
	var (
		fenceJSON string
		lost      error
	)
	if fence != nil && len(fs) > 0 {
		// As MarkPublished: with every lease held and locked, the plain
		// marks are fenced as they are.
		if lost = r.held(ctx, x, fence); lost == nil {
			fence = nil
		} else if !errors.Is(lost, store.ErrLeaseLost) {
			return now, lost
		} else {
			fenceJSON = fence.JSON()
		}
	}
	for _, f := range fs {
		strike := 0
		if f.Strike {
			strike = 1
		}
		q, args := r.q.markFailed[0], []any{strike, f.Err, f.Delay.Microseconds(), f.Dead, f.ID}
		if fence != nil {
			q, args = r.q.markFailed[1], append([]any{fence.Partitions, fence.Instance, fenceJSON}, args...)
		}
		if _, err := x.ExecContext(ctx, q, args...); err != nil {
			return now, err
		}
	}
	return now, lost
}

// RecoverOutage runs at READ COMMITTED, whatever the session's default: at
// REPEATABLE READ its range UPDATE takes next-key locks, and while it waits
// for a row another batch holds (marked failed, not yet committed), the gap
// before that row, where new events go, stays locked and the application's
// saves wait.
func (r *relay) RecoverOutage(ctx context.Context, db store.DB, rec store.Recovery) (int64, error) {
	q, more := r.q.recoverOutage[0], []any(nil)
	if f := rec.Fence; f != nil {
		q, more = r.q.recoverOutage[1], []any{f.Partitions, f.Instance, f.JSON()}
	}
	var total int64
	for i := range rec.Topics { // a transaction each, as autocommit was: no lock held across pairs
		var n int64
		err := store.InTx(ctx, db, readCommitted, func(tx store.Execer) (err error) {
			n, err = store.Affected(ctx, tx, q, append(more, rec.Since.UTC(), rec.Topics[i], rec.Types[i])...)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

func (r *relay) Stats(ctx context.Context, x store.Execer) (store.Stats, error) {
	var (
		s   store.Stats
		age sql.NullInt64
	)
	if err := store.QueryRow(ctx, x, r.q.stats, nil, &s.Pending, &s.Failing, &age, &s.Dead); err != nil {
		return s, err
	}
	if age.Valid {
		s.OldestPending = time.Duration(age.Int64) * time.Microsecond
	}
	return s, nil
}

func (r *relay) Dead(ctx context.Context, x store.Execer, limit int) ([]store.Row, error) {
	return store.Collect(ctx, x, r.q.dead, []any{limit}, scanDead)
}

// Requeue requeues id at READ COMMITTED, passing over rows relays claimed
// instead of waiting for them.
func (r *relay) Requeue(ctx context.Context, db store.DB, id string) (bool, error) {
	var ok bool
	err := store.InTx(ctx, db, readCommitted, func(tx store.Execer) error {
		var err error
		ok, err = r.requeue(ctx, tx, id)
		return err
	})
	return ok, err
}

// requeue requeues the dead event id in x's transaction.
func (r *relay) requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	var seq int64
	if err := store.QueryRow(ctx, x, r.q.seqOf, []any{id}, &seq); errors.Is(err, sql.ErrNoRows) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	n, err := store.Affected(ctx, x, r.q.requeue, seq)
	return n > 0, err
}

// RequeueAll requeues at READ COMMITTED, as Requeue does: the dead rows
// found by a read that locks nothing, then changed by the primary key.
func (r *relay) RequeueAll(ctx context.Context, db store.DB) (int64, error) {
	var n int64
	err := store.InTx(ctx, db, readCommitted, func(tx store.Execer) error {
		var err error
		seqs, err := store.Column[int64](ctx, tx, r.q.deadSeqs)
		if err != nil {
			return err
		}
		n, err = bySeqs(ctx, tx, r.q.requeueSeqs, seqs)
		return err
	})
	return n, err
}

// Cleanup deletes a batch (DELETE ... LIMIT), at READ COMMITTED: no gap lock
// on the processed index for new events to wait on; concurrent cleaners take
// turns on InnoDB's row locks.
func (r *relay) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return cleanup(ctx, db, r.q.cleanup, olderThan, limit)
}

func (r *relay) Leases() store.Leases { return r.leases }

type leases struct {
	t, rt string
}

func newLeases(t ident.Table) leases {
	return leases{t: Quote(t.Derived("_leases")), rt: Quote(t.Derived("_relays"))}
}

func (l leases) Seed(ctx context.Context, x store.Execer, n int) error {
	vals := make([]string, n)
	args := make([]any, n)
	for i := range n {
		vals[i], args[i] = "(?)", i
	}
	_, err := x.ExecContext(ctx, "INSERT INTO "+l.t+" (`partition`) VALUES "+strings.Join(vals, ", ")+
		" ON DUPLICATE KEY UPDATE `partition` = `partition`", args...)
	return err
}

func (l leases) Heartbeat(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `INSERT INTO `+l.rt+` (instance, seen_at) VALUES (?, `+Now+`)
ON DUPLICATE KEY UPDATE seen_at = `+Now, instance)
	return err
}

func (l leases) Live(ctx context.Context, x store.Execer, within time.Duration) (int, error) {
	var n int
	err := store.QueryRow(ctx, x, `SELECT COUNT(*) FROM `+l.rt+` WHERE seen_at > `+Now+` - INTERVAL ? MICROSECOND`, []any{within.Microseconds()}, &n)
	return n, err
}

// Renew extends the unexpired leases, then reads them back (no RETURNING).
func (l leases) Renew(ctx context.Context, x store.Execer, instance string, lease time.Duration) ([]store.Lease, error) {
	if _, err := x.ExecContext(ctx, `UPDATE `+l.t+` SET expires_at = `+Now+` + INTERVAL ? MICROSECOND WHERE owner = ? AND expires_at > `+Now,
		lease.Microseconds(), instance); err != nil {
		return nil, err
	}
	return store.Collect(ctx, x, "SELECT `partition`, generation FROM "+l.t+" WHERE owner = ? AND expires_at > "+Now, []any{instance}, store.ScanLease)
}

func (l leases) Release(ctx context.Context, x store.Execer, instance string, parts []int) error {
	if len(parts) == 0 {
		return nil
	}
	_, err := x.ExecContext(ctx, "UPDATE "+l.t+" SET owner = '', expires_at = '1970-01-01 00:00:00' WHERE owner = ? AND `partition` IN ("+placeholders(len(parts))+")",
		append([]any{instance}, anys(parts)...)...)
	return err
}

// Acquire locks expired partitions (skipping those another instance is
// taking) and takes them, in one READ COMMITTED transaction (no RETURNING, and
// no UPDATE with a subquery on the table it updates).
func (l leases) Acquire(ctx context.Context, db store.DB, instance string, lease time.Duration, n, partitions int) ([]store.Lease, error) {
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	got, err := store.Column[int](ctx, tx, "SELECT `partition` FROM "+l.t+" WHERE expires_at <= "+Now+" AND `partition` < ? ORDER BY `partition` LIMIT ? FOR UPDATE SKIP LOCKED",
		partitions, n)
	if err != nil || len(got) == 0 {
		return nil, err
	}
	in := "`partition` IN (" + placeholders(len(got)) + ")"
	if _, err := tx.ExecContext(ctx, "UPDATE "+l.t+" SET owner = ?, expires_at = "+Now+" + INTERVAL ? MICROSECOND, generation = generation + 1 WHERE "+in,
		append([]any{instance, lease.Microseconds()}, anys(got)...)...); err != nil {
		return nil, err
	}
	out, err := store.Collect(ctx, tx, "SELECT `partition`, generation FROM "+l.t+" WHERE "+in, anys(got), store.ScanLease)
	if err != nil {
		return nil, err
	}
	return out, tx.Commit()
}

func (l leases) ReleaseAll(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `UPDATE `+l.t+` SET owner = '', expires_at = '1970-01-01 00:00:00' WHERE owner = ?`, instance)
	return err
}

func (l leases) Leave(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `DELETE FROM `+l.rt+` WHERE instance = ?`, instance)
	return err
}

// scanDead reads a dead event: the claimed columns, last_error, dead_at.
func scanDead(rows *sql.Rows) (store.Row, error) {
	var (
		lastErr sql.NullString
		deadAt  any
	)
	d, err := scanClaimed(rows, &lastErr, &deadAt)
	if err != nil {
		return d, err
	}
	d.LastError = lastErr.String
	d.DeadAt, err = parseTime(deadAt)
	return d, err
}

// bySeqs runs q on the rows seqs (its first argument, a JSON array), a
// thousand at a time, with the arguments more after them, and returns the
// rows it changed.
func bySeqs(ctx context.Context, x store.Execer, q string, seqs []int64, more ...any) (int64, error) {
	var total int64
	for len(seqs) > 0 {
		chunk := seqs[:min(len(seqs), 1000)]
		seqs = seqs[len(chunk):]
		n, err := store.Affected(ctx, x, q, append([]any{store.JSONInts(chunk)}, more...)...)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
