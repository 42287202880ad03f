package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Relay returns the relay's operations on the outbox table t.
func (Driver) Relay(t ident.Table) store.Relay { return newRelay(t) }

// Waker returns store.NoWaker: SQLite has no LISTEN/NOTIFY. Relays in other
// processes find events by polling (Config.PollInterval); within one process,
// Notify is a relay's Wake.
func (Driver) Waker() store.Waker { return store.NoWaker{} }

// WALOutbox returns store.ErrNotSupported: the outbox is a table here.
func (Driver) WALOutbox(string) (store.Outbox, error) { return nil, store.ErrNotSupported }

// WAL returns nil: the outbox is a table here.
func (Driver) WAL() store.WAL { return nil }

const pending = `processed_at IS NULL AND dead_at IS NULL`

const claimCols = `id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, attempts, strikes`

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
		dueLeased, claimLeased, claimOrdered, stats, dead, requeue, requeueAll, cleanup, fenceHeld string
		recoverOutage                                                                              [2]string // [unfenced, fenced]
		// by fencing: [none, the claim's lease, the partition leases]
		markDelete, markProcessed, markFailed [3]string
		unlease                               string
	}
	leases leases
}

func newRelay(t ident.Table) *relay {
	r := &relay{t: t}
	lt := t.Derived("_leases").Quoted()
	rep := strings.NewReplacer("{set}", requeueSet, "{t}", t.Quoted(), "{cols}", claimCols, "{pending}", pending, "{now}", Now, "{leases}", lt)
	q := &r.q
	// The due rows in due order, then one statement, under SQLite's single
	// writer, that leases those still due: the rows it moves past the lease
	// are this claim's alone. The claim keeps the due order, as on the other
	// databases (a failed event waits behind the others, not ahead of them in
	// every batch); RETURNING gives neither that order nor the old
	// available_at, hence the read first.
	q.dueLeased = rep.Replace(`SELECT seq FROM {t} WHERE {pending} AND available_at <= {now} ORDER BY available_at, seq LIMIT ?`)
	q.claimLeased = rep.Replace(`UPDATE {t} SET available_at = {now} + ?
WHERE seq IN (SELECT value FROM json_each(?)) AND {pending} AND available_at <= {now}
RETURNING seq, {cols}, available_at`)
	q.claimOrdered = rep.Replace(`WITH blocked AS (
  SELECT aggregate_type, aggregate_id, min(seq) AS seq FROM {t}
  WHERE {pending} AND available_at > {now} AND aggregate_id <> ''
  GROUP BY aggregate_type, aggregate_id)
SELECT o.seq, o.id, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.payload, o.metadata, o.occurred_at, o.attempts, o.strikes
FROM {t} o
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= {now}
  AND o.part_key % ? IN ({owned})
  AND NOT EXISTS (SELECT 1 FROM blocked b
    WHERE b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id AND b.seq < o.seq)
ORDER BY o.seq LIMIT ?`)
	// Marks find their rows by seq, the rowid, and are fenced: by the
	// claim's own lease (ClaimLeased: the available_at it set, which a later
	// claim of the row, or anything that made it due again, changed), or in
	// ordered mode by the partition leases of the batch (the row's partition
	// still leased to this instance under the generation it took). SQLite has
	// one writer: no Acquire runs between the check and the write.
	const bySeq = `seq IN (SELECT value FROM json_each(?))`
	const byLease = `(seq, available_at) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))`
	const fenced = `part_key % ? IN (SELECT l.partition FROM {leases} l JOIN json_each(?) f
    ON l.partition = json_extract(f.value, '$[0]') AND l.generation = json_extract(f.value, '$[1]')
  WHERE l.owner = ?)`
	q.fenceHeld = rep.Replace(`SELECT count(*) FROM {leases} l JOIN json_each(?) f
  ON l.partition = json_extract(f.value, '$[0]') AND l.generation = json_extract(f.value, '$[1]')
WHERE l.owner = ?`)
	for i, where := range [3]string{bySeq, byLease, bySeq + ` AND ` + fenced} {
		q.markDelete[i] = rep.Replace(`DELETE FROM {t} WHERE ` + where)
		q.markProcessed[i] = rep.Replace(`UPDATE {t} SET processed_at = {now}, last_error = NULL WHERE ` + where)
	}
	q.unlease = rep.Replace(`UPDATE {t} SET available_at = min(coalesce(last_failed_at, created_at), {now})
WHERE {pending} AND ` + byLease)
	for i, where := range [3]string{``, ` AND available_at = ?`, ` AND ` + fenced} {
		q.markFailed[i] = rep.Replace(`UPDATE {t} SET
  attempts = attempts + 1,
  strikes = strikes + ?,
  last_error = ?,
  last_failed_at = ?,
  available_at = ? + ?,
  dead_at = CASE WHEN ? THEN ? END
WHERE id = ? AND {pending}` + where)
	}
	for i, where := range [2]string{``, ` AND ` + fenced} {
		q.recoverOutage[i] = rep.Replace(`UPDATE {t} SET available_at = {now}
WHERE {pending} AND attempts > 0 AND available_at > {now} AND last_failed_at >= ? AND topic = ? AND type = ?` + where)
	}
	q.stats = rep.Replace(`SELECT count(*), coalesce(sum(attempts > 0), 0), {now} - min(created_at),
  (SELECT count(*) FROM {t} WHERE dead_at IS NOT NULL)
FROM {t} WHERE {pending}`)
	q.dead = rep.Replace(`SELECT {cols}, last_error, dead_at FROM {t} WHERE dead_at IS NOT NULL ORDER BY dead_at, seq LIMIT ?`)
	q.requeue = rep.Replace(`UPDATE {t} SET {set}
WHERE id = ? AND dead_at IS NOT NULL`)
	q.requeueAll = rep.Replace(`UPDATE {t} SET {set}
WHERE dead_at IS NOT NULL`)
	q.cleanup = rep.Replace(`DELETE FROM {t} WHERE seq IN (SELECT seq FROM {t} WHERE processed_at < {now} - ? LIMIT ?)`)
	r.leases = newLeases(t)
	return r
}

func (r *relay) Create(ctx context.Context, x store.Execer, ordered, retention bool, skip func(string, error) bool) error {
	return schema.CreateRelay(ctx, x, r.t, ordered, retention, skip)
}

func (r *relay) Check(ctx context.Context, x store.Execer, ordered, retention bool) error {
	return schema.CheckRelay(ctx, x, r.t, ordered, retention)
}

// placeholders returns "?, ?, ..." for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// claim runs the claim q and returns its rows in seq order, or in the order of
// rank (by seq) when given; leased: q returns the lease it set last.
func (r *relay) claim(ctx context.Context, x store.Execer, rank map[int64]int, leased bool, q string, args ...any) ([]store.Row, error) {
	out, err := store.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Row, error) {
		var (
			c                 store.Row
			payload, metadata string
			occurred          int64
		)
		dest := []any{&c.Seq, &c.ID, &c.Type, &c.Version, &c.AggregateType, &c.AggregateID, &c.Topic,
			&payload, &metadata, &occurred, &c.Attempts, &c.Strikes}
		if leased {
			dest = append(dest, &c.Lease)
		}
		err := rows.Scan(dest...)
		c.Payload, c.Metadata, c.OccurredAt = []byte(payload), []byte(metadata), time.UnixMicro(occurred).UTC()
		return c, err
	})
	if err != nil {
		return nil, err
	}
	// RETURNING yields rows in no promised order.
	slices.SortFunc(out, func(a, b store.Row) int {
		if rank != nil {
			return rank[a.Seq] - rank[b.Seq]
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	return out, nil
}

// claimLeased claims up to limit due events by moving their available_at
// lease ahead, in a statement of its own: nobody else claims them until then,
// and a relay that dies leaves them to be claimed again when the lease ends.
func (r *relay) claimLeased(ctx context.Context, x store.Execer, limit int, lease time.Duration) ([]store.Row, error) {
	due, err := store.Column[int64](ctx, x, r.q.dueLeased, limit)
	if err != nil || len(due) == 0 {
		return nil, err
	}
	rank := make(map[int64]int, len(due))
	for i, seq := range due {
		rank[seq] = i
	}
	return r.claim(ctx, x, rank, true, r.q.claimLeased, lease.Microseconds(), store.JSONInts(due))
}

// unlease makes the rows due again at about the time they were due before
// the claim (their insert, or their last failure: the lease overwrote the
// exact time), not now: else rows a batch had no time for would go behind
// the events that failed in it, and again every batch, never tried while a
// failing event comes first (the other databases release such rows
// untouched). Only rows that still hold the claim's lease.
func (r *relay) unlease(ctx context.Context, x store.Execer, keys []store.Key) error {
	return store.ExecSeqLeases(ctx, x, r.q.unlease, keys)
}

// claimOrdered returns up to limit due events of the owned partitions, in
// insertion order, leaving out those behind an earlier event of their
// aggregate that waits for a retry.
func (r *relay) claimOrdered(ctx context.Context, x store.Execer, limit, partitions int, owned []int32) ([]store.Row, error) {
	if len(owned) == 0 {
		return nil, nil
	}
	q := strings.Replace(r.q.claimOrdered, "{owned}", placeholders(len(owned)), 1)
	args := append(append([]any{partitions}, anys(owned)...), limit)
	return r.claim(ctx, x, nil, false, q, args...)
}

// fencing returns how the marks of keys are fenced: 2 by the fence, 1 by the
// claim's leases, 0 not at all.
func fencing(leased bool, fence *store.Fence) int {
	switch {
	case fence != nil:
		return 2
	case leased:
		return 1
	}
	return 0
}

// held counts the fence's leases still held: after the fenced marks, in
// their transaction (SQLite's one writer: nothing took one in between).
func (r *relay) held(ctx context.Context, x store.Execer, fence *store.Fence) error {
	var n int
	if err := store.QueryRow(ctx, x, r.q.fenceHeld, []any{fence.JSON(), fence.Instance}, &n); err != nil {
		return err
	}
	return store.CheckFence(fence, n)
}

// MarkPublished deletes published events, or with keep stamps them
// processed: a key with a Lease only while its row holds that lease; with a
// fence, a row only while its partition's lease is the fence's (else
// ErrLeaseLost, after marking the rows of the partitions still held).
func (r *relay) MarkPublished(ctx context.Context, x store.Execer, keys []store.Key, keep bool, fence *store.Fence) error {
	if len(keys) == 0 {
		return nil
	}
	q := r.q.markDelete
	if keep {
		q = r.q.markProcessed
	}
	switch f := fencing(keys[0].Lease != 0, fence); f {
	case 1:
		return store.ExecSeqLeases(ctx, x, q[f], keys)
	case 2:
		seqs, err := store.SeqsJSON(keys)
		if err != nil {
			return err
		}
		if _, err := x.ExecContext(ctx, q[f], seqs, fence.Partitions, fence.JSON(), fence.Instance); err != nil {
			return err
		}
		return r.held(ctx, x, fence)
	default:
		return store.ExecSeqs(ctx, x, q[f], keys)
	}
}

// MarkFailed records failures, fenced as MarkPublished is, and returns
// the time of the marks. It updates each row: failures are few next to
// publishes.
func (r *relay) MarkFailed(ctx context.Context, x store.Execer, fs []store.Failure, fence *store.Fence) (time.Time, error) {
	now := time.Now().UTC()
	us := now.UnixMicro()
	var fenceJSON string
	if fence != nil {
		fenceJSON = fence.JSON()
	}
	for _, f := range fs {
		strike := 0
		if f.Strike {
			strike = 1
		}
		args := []any{strike, f.Err, us, us, f.Delay.Microseconds(), f.Dead, us, f.ID}
		i := fencing(f.Lease != 0, fence)
		switch i {
		case 1:
			args = append(args, f.Lease)
		case 2:
			args = append(args, fence.Partitions, fenceJSON, fence.Instance)
		}
		if _, err := x.ExecContext(ctx, r.q.markFailed[i], args...); err != nil {
			return now, err
		}
	}
	if fence != nil && len(fs) > 0 {
		return now, r.held(ctx, x, fence)
	}
	return now, nil
}

func (r *relay) RecoverOutage(ctx context.Context, db store.DB, rec store.Recovery) (int64, error) {
	q, more := r.q.recoverOutage[0], []any(nil)
	if rec.Fence != nil {
		q, more = r.q.recoverOutage[1], []any{rec.Fence.Partitions, rec.Fence.JSON(), rec.Fence.Instance}
	}
	var total int64
	for i := range rec.Topics {
		n, err := store.Affected(ctx, db, q, append([]any{rec.Since.UnixMicro(), rec.Topics[i], rec.Types[i]}, more...)...)
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
	rows, err := x.QueryContext(ctx, r.q.stats)
	if err != nil {
		return s, err
	}
	defer func() { _ = rows.Close() }()
	if rows.Next() {
		if err := rows.Scan(&s.Pending, &s.Failing, &age, &s.Dead); err != nil {
			return s, err
		}
	}
	if age.Valid {
		s.OldestPending = time.Duration(age.Int64) * time.Microsecond
	}
	return s, rows.Err()
}

func (r *relay) Dead(ctx context.Context, x store.Execer, limit int) ([]store.Row, error) {
	return store.Collect(ctx, x, r.q.dead, []any{limit}, scanDead)
}

func (r *relay) Requeue(ctx context.Context, db store.DB, id string) (bool, error) {
	return r.requeue(ctx, db, id)
}

// requeue requeues the dead event id in x's transaction.
func (r *relay) requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	n, err := store.Affected(ctx, x, r.q.requeue, id)
	return n > 0, err
}

func (r *relay) RequeueAll(ctx context.Context, db store.DB) (int64, error) {
	return store.Affected(ctx, db, r.q.requeueAll)
}

// Cleanup deletes a batch; SQLite's single writer makes cleaners take turns.
func (r *relay) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return store.Affected(ctx, db, r.q.cleanup, olderThan.Microseconds(), limit)
}

func (r *relay) Leases() store.Leases { return r.leases }

type leases struct {
	t, rt string
}

func newLeases(t ident.Table) leases {
	return leases{t: t.Derived("_leases").Quoted(), rt: t.Derived("_relays").Quoted()}
}

func (l leases) Seed(ctx context.Context, x store.Execer, n int) error {
	_, err := x.ExecContext(ctx, `WITH RECURSIVE p(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM p WHERE i + 1 < ?)
INSERT INTO `+l.t+` (partition) SELECT i FROM p WHERE true ON CONFLICT DO NOTHING`, n)
	return err
}

func (l leases) Heartbeat(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `INSERT INTO `+l.rt+` (instance, seen_at) VALUES (?, `+Now+`)
ON CONFLICT (instance) DO UPDATE SET seen_at = excluded.seen_at`, instance)
	return err
}

func (l leases) Live(ctx context.Context, x store.Execer, within time.Duration) (int, error) {
	n, err := store.Column[int](ctx, x, `SELECT count(*) FROM `+l.rt+` WHERE seen_at > `+Now+` - ?`, within.Microseconds())
	if err != nil || len(n) == 0 {
		return 0, err
	}
	return n[0], nil
}

func (l leases) Renew(ctx context.Context, x store.Execer, instance string, lease time.Duration) ([]store.Lease, error) {
	return store.Collect(ctx, x, `UPDATE `+l.t+` SET expires_at = `+Now+` + ? WHERE owner = ? AND expires_at > `+Now+` RETURNING partition, generation`,
		[]any{lease.Microseconds(), instance}, store.ScanLease)
}

func (l leases) Release(ctx context.Context, x store.Execer, instance string, parts []int) error {
	if len(parts) == 0 {
		return nil
	}
	_, err := x.ExecContext(ctx, `UPDATE `+l.t+` SET owner = '', expires_at = 0 WHERE owner = ? AND partition IN (`+placeholders(len(parts))+`)`,
		append([]any{instance}, anys(parts)...)...)
	return err
}

func (l leases) Acquire(ctx context.Context, db store.DB, instance string, lease time.Duration, n, partitions int) ([]store.Lease, error) {
	return store.Collect(ctx, db, `UPDATE `+l.t+` SET owner = ?, expires_at = `+Now+` + ?, generation = generation + 1
WHERE partition IN (SELECT partition FROM `+l.t+` WHERE expires_at <= `+Now+` AND partition < ? ORDER BY partition LIMIT ?)
RETURNING partition, generation`, []any{instance, lease.Microseconds(), partitions, n}, store.ScanLease)
}

func (l leases) ReleaseAll(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `UPDATE `+l.t+` SET owner = '', expires_at = 0 WHERE owner = ?`, instance)
	return err
}

func (l leases) Leave(ctx context.Context, x store.Execer, instance string) error {
	_, err := x.ExecContext(ctx, `DELETE FROM `+l.rt+` WHERE instance = ?`, instance)
	return err
}

// scanDead reads a dead event: the claimed columns, last_error, dead_at.
func scanDead(rows *sql.Rows) (store.Row, error) {
	var (
		d                 store.Row
		payload, metadata string
		occurred, deadAt  int64
		lastErr           sql.NullString
	)
	if err := rows.Scan(&d.ID, &d.Type, &d.Version, &d.AggregateType, &d.AggregateID, &d.Topic, &payload, &metadata,
		&occurred, &d.Attempts, &d.Strikes, &lastErr, &deadAt); err != nil {
		return d, err
	}
	d.Payload, d.Metadata = []byte(payload), []byte(metadata)
	d.OccurredAt, d.DeadAt, d.LastError = time.UnixMicro(occurred).UTC(), time.UnixMicro(deadAt).UTC(), lastErr.String
	return d, nil
}
