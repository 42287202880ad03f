package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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

// requeueSet makes a dead event pending again (Requeue, RequeueAll and the admin's requeues).
const requeueSet = `dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = now()`

type relay struct {
	t ident.Table
	q struct {
		claimLocked, claimOrdered                                                                              [2]string // by [frontier check]
		claimLeased, unlease                                                                                   string
		markDelete, markProcessed, markFailed                                                                  [2]string // by [fenced]
		recoverOutage, recoverOwned, stats, storage, dead, requeue, requeueAll, cleanup, cleanupDefault, probe string
	}
	leases leases
	pos    *position // where claims start; shared with the sweeping view
	sweep  bool      // the sweeping view: unordered claims start at the head
}

func newRelay(t ident.Table) *relay {
	r := &relay{t: t, pos: newPosition()}
	rep := strings.NewReplacer("{set}", requeueSet, "{async}", asyncCommit, "{t}", t.Quoted(), "{cols}", claimCols, "{pending}", pending, "{part}", partitionExpr)
	q := &r.q
	frontier := [2]string{`NULL::timestamptz`, frontierSQL(t)}
	// The last seq taken, where the role may read the sequence (NULL
	// otherwise): every seq up to it was taken before the clock read after it,
	// and the frontier, read after both, may settle it.
	lastSeq := [2]string{`NULL::bigint`, `(SELECT CASE WHEN has_sequence_privilege(s.oid, 'SELECT,USAGE') THEN pg_sequence_last_value(s.oid) END
      FROM (SELECT pg_get_serial_sequence(` + quoteLiteral(t.Quoted()) + `, 'seq')::regclass AS oid) s)`}
	for check := range 2 {
		fr := strings.NewReplacer("{frontier}", frontier[check], "{lastseq}", lastSeq[check])
		// The pending index (available_at, id) serves this scan in order, from
		// the position ($2, $3; the head when NULL) instead of the head, where
		// the index entries of published rows lie until vacuum removes them;
		// locked rows are skipped, so instances share the work. The one row of
		// m comes back even when nothing is claimed (c's columns NULL).
		q.claimLocked[check] = fr.Replace(rep.Replace(`SELECT m.dbnow, m.frontier, c.* FROM
  (SELECT now() AS dbnow, {frontier} AS frontier, set_config('synchronous_commit', 'off', true) AS herald_async) m
LEFT JOIN LATERAL (SELECT {cols}, o.available_at FROM {t} o
  WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
    AND (o.available_at, o.id) >= (coalesce($2::timestamptz, '-infinity'), coalesce($3::uuid, '00000000-0000-0000-0000-000000000000'))
  ORDER BY o.available_at, o.id LIMIT $1 FOR UPDATE OF o SKIP LOCKED) c ON true`))
		// Only this instance reads its partitions, so no row locks. An event is
		// due unless an earlier event of its aggregate waits for a retry
		// ("blocked", usually few rows). As an anti-join, not a NOT EXISTS per
		// row: the per-row subplan made the planner's estimate big enough to
		// JIT-compile every claim (200 ms each) once the backlog grew. The scan
		// of the ordered index (seq) starts at the partitions' position ($4);
		// "waiting" is where and when the earliest of their events waiting for
		// a retry is, for the claim that will have to start there.
		q.claimOrdered[check] = fr.Replace(rep.Replace(`WITH blocked AS MATERIALIZED (
  SELECT aggregate_type, aggregate_id, min(seq) AS seq FROM {t}
  WHERE {pending} AND available_at > now() AND aggregate_id <> ''
  GROUP BY aggregate_type, aggregate_id),
waiting AS MATERIALIZED (
  SELECT min(o.seq) AS seq, min(o.available_at) AS at FROM {t} o
  WHERE {pending} AND o.available_at > now() AND {part} = ANY($3::int[]))
SELECT m.dbnow, m.frontier, m.lastseq, m.clock, w.seq, w.at, c.* FROM
  (SELECT now() AS dbnow, l.lastseq, l.clock, {frontier} AS frontier
   FROM (SELECT {lastseq} AS lastseq, clock_timestamp() AS clock) l) m
  CROSS JOIN waiting w
LEFT JOIN LATERAL (SELECT {cols}, o.seq, p.part FROM {t} o, LATERAL (SELECT {part} AS part) p
  WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
    AND o.seq >= $4::bigint
    AND p.part = ANY($3::int[])
    AND NOT EXISTS (SELECT 1 FROM blocked b
      WHERE b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id AND b.seq < o.seq)
  ORDER BY o.seq LIMIT $1) c ON true`))
	}
	// The sweep of ordered mode: due events of the partitions below their
	// position ($5, by partition), which lowers it.
	q.probe = rep.Replace(`SELECT o.seq, {part} FROM {t} o
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
  AND o.seq < $4::bigint AND {part} = ANY($3::int[]) AND o.seq < ($5::bigint[])[{part} + 1]
ORDER BY o.seq LIMIT $1`)
	q.claimLeased = rep.Replace(`UPDATE {t} AS o SET available_at = statement_timestamp() + $2::float8 * interval '1 millisecond'
WHERE o.id IN (SELECT id FROM {t} WHERE {pending} AND available_at <= statement_timestamp()
  ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING {cols}`)
	q.unlease = rep.Replace(`UPDATE {t} SET available_at = statement_timestamp() WHERE id = ANY($1::uuid[]) AND {pending}`)
	q.markDelete[0] = rep.Replace(`DELETE FROM {t} WHERE id = ANY($1::uuid[])`)
	q.markProcessed[0] = rep.Replace(`UPDATE {t} SET processed_at = now(), last_error = NULL WHERE id = ANY($1::uuid[])`)
	// statement_timestamp, not now(): in a claim's transaction now() is its
	// start, before publishing, which would shorten the backoffs.
	markFailed := `UPDATE {t} AS o SET
  attempts = o.attempts + 1,
  strikes = o.strikes + CASE WHEN u.strike THEN 1 ELSE 0 END,
  last_error = u.err,
  last_failed_at = statement_timestamp(),
  available_at = statement_timestamp() + u.delay * interval '1 microsecond',
  dead_at = CASE WHEN u.dead THEN statement_timestamp() END
FROM unnest($1::uuid[], $2::text[], $3::bool[], $4::bool[], $5::float8[]) AS u(id, err, strike, dead, delay)
WHERE o.id = u.id AND o.processed_at IS NULL AND o.dead_at IS NULL`
	q.markFailed[0] = rep.Replace(markFailed)
	// Fenced (ordered mode): only rows whose partition is still leased to
	// this instance under the generation the batch holds (the fence), its
	// lease rows locked FOR SHARE until the marks commit, so that no Acquire
	// takes one between the check and the write (Acquire skips locked rows;
	// one that committed first is seen, its generation bumped). The
	// statement returns how many of the fence's leases it found held.
	fenced := func(first int, mark string) string {
		n := func(i int) string { return fmt.Sprintf("$%d", first+i) }
		part := strings.Replace(partitionExpr, "$2", n(0), 1)
		return rep.Replace(`WITH f AS (SELECT l.partition FROM ` + t.Derived("_leases").Quoted() + ` l
    JOIN unnest(` + n(2) + `::int[], ` + n(3) + `::bigint[]) AS g(part, gen) ON l.partition = g.part AND l.generation = g.gen
  WHERE l.owner = ` + n(1) + ` FOR SHARE OF l),
m AS (` + mark + `
  AND ` + part + ` IN (SELECT partition FROM f) RETURNING 1)
SELECT count(*) FROM f`)
	}
	q.markDelete[1] = fenced(2, `DELETE FROM {t} o WHERE o.id = ANY($1::uuid[])`)
	q.markProcessed[1] = fenced(2, `UPDATE {t} o SET processed_at = now(), last_error = NULL WHERE o.id = ANY($1::uuid[])`)
	q.markFailed[1] = fenced(6, markFailed)
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
	r.leases = newLeases(t)
	return r
}

func (r *relay) Create(ctx context.Context, x store.Execer, ordered, retention bool, skip func(string, error) bool) error {
	return schema.CreateRelay(ctx, x, r.t, ordered, retention, skip)
}

func (r *relay) Check(ctx context.Context, x store.Execer, ordered, retention bool) error {
	return schema.CheckRelay(ctx, x, r.t, ordered, retention)
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
	return store.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Claimed, error) { return scanClaimed(rows) })
}

// nullClaimed scans the claim columns of a row whose claim part may be NULL
// (nothing claimed), after the leading columns lead and before extra.
type nullClaimed struct {
	id, typ, aggType, aggID, topic, payload, metadata sql.NullString
	version, attempts, strikes                        sql.NullInt32
	occurred                                          sql.NullTime
}

func (n *nullClaimed) dest(lead []any, extra ...any) []any {
	d := append(lead, &n.id, &n.typ, &n.version, &n.aggType, &n.aggID, &n.topic, &n.payload, &n.metadata,
		&n.occurred, &n.attempts, &n.strikes)
	return append(d, extra...)
}

func (n *nullClaimed) claimed() (store.Claimed, bool) {
	if !n.id.Valid {
		return store.Claimed{}, false
	}
	return store.Claimed{
		ID: n.id.String, Type: n.typ.String, AggregateType: n.aggType.String, AggregateID: n.aggID.String,
		Topic: n.topic.String, Version: int(n.version.Int32), Attempts: int(n.attempts.Int32), Strikes: int(n.strikes.Int32),
		Payload: []byte(n.payload.String), Metadata: []byte(n.metadata.String), OccurredAt: n.occurred.Time,
	}, true
}

// ClaimLocked claims from the position (see position): rows at or above it in
// (available_at, id) order, or from the head in the sweeping view. The
// relay's concurrent batches claim one after the other, each from where the
// last ended, instead of each stepping over the rows the others locked.
func (r *relay) ClaimLocked(ctx context.Context, tx store.Execer, limit int) ([]store.Claimed, error) {
	if !r.sweep {
		r.pos.claimMu.Lock()
		defer r.pos.claimMu.Unlock()
	}
	st := r.pos.unorderedStart(r.sweep)
	var loAt, loID any
	if st.from != nil {
		loAt, loID = st.from.at, st.from.id
	}
	rows, err := tx.QueryContext(ctx, r.q.claimLocked[btoi(st.check)], limit, loAt, loID)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var (
		out      []store.Claimed
		last     key
		dbNow    time.Time
		frontier sql.NullTime
	)
	for rows.Next() {
		var (
			n  nullClaimed
			at sql.NullTime
		)
		if err := rows.Scan(n.dest([]any{&dbNow, &frontier}, &at)...); err != nil {
			return nil, err
		}
		if c, ok := n.claimed(); ok {
			out = append(out, c)
			if k := (key{at.Time, c.ID}); last.less(k) || last.at.IsZero() {
				last = k
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	r.pos.unorderedDone(st, r.sweep, last, len(out) >= limit, dbNow, frontier)
	return out, nil
}

func (r *relay) ClaimLeased(ctx context.Context, x store.Execer, limit int, lease time.Duration) ([]store.Claimed, error) {
	return r.claim(ctx, x, r.q.claimLeased, limit, float64(lease.Milliseconds()))
}

func (r *relay) Unlease(ctx context.Context, x store.Execer, keys []store.Key) error {
	_, err := x.ExecContext(ctx, r.q.unlease, store.IDs(keys))
	return err
}

// ClaimOrdered claims from the lowest position of the owned partitions (see
// position), in seq order.
func (r *relay) ClaimOrdered(ctx context.Context, x store.Execer, limit, partitions int, owned []int32) ([]store.Claimed, error) {
	local := time.Now() // before the database's now: never later
	st := r.pos.orderedStart(owned, local)
	rows, err := x.QueryContext(ctx, r.q.claimOrdered[btoi(st.check)], limit, partitions, owned, st.lo)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var (
		out      []store.Claimed
		seqs     []seqPart
		dbNow    time.Time
		clock    time.Time // after the claim's snapshot
		frontier sql.NullTime
		waitSeq  sql.NullInt64
		waitAt   sql.NullTime
		lastSeq  sql.NullInt64
	)
	for rows.Next() {
		var (
			n    nullClaimed
			seq  sql.NullInt64
			part sql.NullInt32
		)
		if err := rows.Scan(n.dest([]any{&dbNow, &frontier, &lastSeq, &clock, &waitSeq, &waitAt}, &seq, &part)...); err != nil {
			return nil, err
		}
		if c, ok := n.claimed(); ok {
			out = append(out, c)
			seqs = append(seqs, seqPart{seq.Int64, part.Int32})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// In seq order, as the relay publishes each aggregate's events.
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(seqs[a].seq, seqs[b].seq) })
	sorted, sortedSeqs := make([]store.Claimed, len(out)), make([]seqPart, len(out))
	for i, j := range idx {
		sorted[i], sortedSeqs[i] = out[j], seqs[j]
	}
	done := orderedResult{rows: sorted, seqs: sortedSeqs, full: len(out) >= limit, dbNow: dbNow, clock: clock, frontier: frontier}
	if lastSeq.Valid {
		done.last = &observation{clock, lastSeq.Int64}
	}
	if waitSeq.Valid && waitAt.Valid {
		done.waiting = &waiting{seq: waitSeq.Int64, due: waitAt.Time, dueLocal: local.Add(waitAt.Time.Sub(dbNow))}
	}
	r.pos.orderedDone(st, owned, done)
	return sorted, nil
}

// Probe is the sweep of ordered mode: it looks for due events of the owned
// partitions below their positions (events that became due in a way the
// claims do not see: written by something else than Herald, requeued in a
// long transaction) and lowers the positions to them.
func (r *relay) Probe(ctx context.Context, x store.Execer, partitions int, owned []int32) (int, error) {
	below, highest := r.pos.positions(owned, partitions)
	if highest <= 0 {
		return 0, nil
	}
	found, err := store.Collect(ctx, x, r.q.probe, []any{64, partitions, owned, highest, below}, func(rows *sql.Rows) (seqPart, error) {
		var sp seqPart
		err := rows.Scan(&sp.seq, &sp.part)
		return sp, err
	})
	if err != nil {
		return 0, err
	}
	r.pos.lowerOrdered(found)
	return len(found), nil
}

// Sweeper returns the sweeping view of r: its unordered claims start at the
// head, and leave the position alone.
func (r *relay) Sweeper() store.Relay {
	v := *r
	v.sweep = true
	return &v
}

// Rewind forgets the positions: the next claims start at the head. The relay
// calls it after a batch whose marks may not have committed, and when it
// takes partitions over.
func (r *relay) Rewind() { r.pos.rewind() }

// planned makes pgx plan a statement for its arguments each time (an unnamed
// statement) instead of keeping the plan it made first: the marks find their
// rows by id, and a plan made while the outbox was small (a seq scan) stays
// cheap only while it is; a long transaction that keeps the deleted rows
// grows it, and every mark would scan them all.
const planned = pgx.QueryExecModeExec

func (r *relay) MarkPublished(ctx context.Context, x store.Execer, keys []store.Key, keep bool, fence *store.Fence) error {
	ids := store.IDs(keys)
	q := r.q.markDelete
	if keep {
		q = r.q.markProcessed
	}
	var err error
	if fence == nil {
		_, err = x.ExecContext(ctx, q[0], planned, ids)
	} else {
		err = r.fenced(ctx, x, q[1], fence, ids)
	}
	if err == nil {
		r.pos.published(ids)
	}
	return err
}

// fenced runs the fenced mark q (its arguments args, then the fence's) and
// checks that it found every lease of the fence held.
func (r *relay) fenced(ctx context.Context, x store.Execer, q string, fence *store.Fence, args ...any) error {
	parts, gens := fence.Parts()
	var held int
	if err := store.QueryRow(ctx, x, q, append(append([]any{planned}, args...), fence.Partitions, fence.Instance, parts, gens), &held); err != nil {
		return err
	}
	return store.CheckFence(fence, held)
}

func (r *relay) MarkFailed(ctx context.Context, x store.Execer, fs []store.Failure, fence *store.Fence) (time.Time, error) {
	n := len(fs)
	ids, errs := make([]string, n), make([]string, n)
	strikes, dead, delays := make([]bool, n), make([]bool, n), make([]float64, n)
	for i, f := range fs {
		ids[i], errs[i], strikes[i], dead[i], delays[i] = f.ID, f.Err, f.Strike, f.Dead, float64(f.Delay.Microseconds())
	}
	// The time read first is at or before the marks' own.
	var now time.Time
	local := time.Now() // before the database's now: never later
	if err := store.QueryRow(ctx, x, `SELECT statement_timestamp()`, nil, &now); err != nil {
		return now, err
	}
	// Lowered before the marks commit: a claim running meanwhile may pass
	// over a row whose retry is soon due.
	r.pos.failed(fs, now, local)
	if fence != nil {
		return now, r.fenced(ctx, x, r.q.markFailed[1], fence, ids, errs, strikes, dead, delays)
	}
	_, err := x.ExecContext(ctx, r.q.markFailed[0], planned, ids, errs, strikes, dead, delays)
	return now, err
}

func (r *relay) RecoverOutage(ctx context.Context, x store.Execer, since time.Time, topics, types []string) (int64, error) {
	return r.recover(ctx, x, r.q.recoverOutage, since, topics, types)
}

// RecoverOwned is RecoverOutage on the partitions the fence's leases still
// hold.
func (r *relay) RecoverOwned(ctx context.Context, x store.Execer, since time.Time, topics, types []string, fence *store.Fence) (int64, error) {
	parts, gens := fence.Parts()
	return r.recover(ctx, x, r.q.recoverOwned, since, topics, types, fence.Partitions, fence.Instance, parts, gens)
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

func (r *relay) Dead(ctx context.Context, x store.Execer, limit int) ([]store.DeadRow, error) {
	return store.Collect(ctx, x, r.q.dead, []any{limit}, scanDead)
}

// Requeue makes a dead event pending again; the positions go back to the
// head (the event keeps its place in the order; the next claim finds it).
func (r *relay) Requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	n, err := store.Affected(ctx, x, r.q.requeue, id)
	if n > 0 {
		r.pos.rewind()
	}
	return n > 0, err
}

func (r *relay) RequeueAll(ctx context.Context, x store.Execer) (int64, error) {
	n, err := store.Affected(ctx, x, r.q.requeueAll)
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

func (r *relay) Leases() store.Leases { return r.leases }

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
WHERE owner = $1 AND expires_at > now() RETURNING partition, generation`,
		release: `UPDATE ` + lt + ` SET owner = '', expires_at = '-infinity' WHERE owner = $1 AND partition = ANY($2::int[])`,
		acquire: `UPDATE ` + lt + ` SET owner = $1, expires_at = now() + $2::float8 * interval '1 millisecond', generation = generation + 1
WHERE partition IN (SELECT partition FROM ` + lt + ` WHERE expires_at <= now() AND partition < $4
  ORDER BY partition LIMIT $3 FOR UPDATE SKIP LOCKED)
RETURNING partition, generation`,
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
	err := store.QueryRow(ctx, x, l.live, []any{ms(within)}, &n)
	return n, err
}

func (l leases) Renew(ctx context.Context, x store.Execer, instance string, lease time.Duration) ([]store.Lease, error) {
	return store.Collect(ctx, x, l.renew, []any{instance, ms(lease)}, store.ScanLease)
}

func (l leases) Release(ctx context.Context, x store.Execer, instance string, parts []int) error {
	_, err := x.ExecContext(ctx, l.release, instance, parts)
	return err
}

func (l leases) Acquire(ctx context.Context, db store.DB, instance string, lease time.Duration, n, partitions int) ([]store.Lease, error) {
	return store.Collect(ctx, db, l.acquire, []any{instance, ms(lease), n, partitions}, store.ScanLease)
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

// Listen opens a connection of its own, outside db's pool (with the
// configuration of db's pgx connections), LISTENs on channel and calls wake
// for each notification (and once on start, for what was committed
// meanwhile), until ctx is done or the connection fails; then it closes the
// connection. A session in LISTEN is never given back, so it takes none of
// the application's pool: a pool of one connection keeps it for the saves.
func (waker) Listen(ctx context.Context, db *sql.DB, channel string, wake func()) error {
	cfg, err := connConfig(ctx, db)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("listen: connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// Quoted: LISTEN folds an unquoted name to lower case, pg_notify does not.
	if _, err := conn.Exec(ctx, `LISTEN `+ident.Name(channel).Quoted()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}

// connConfig returns the pgx configuration db's connections are made with,
// read from one of its connections (given back at once).
func connConfig(ctx context.Context, db *sql.DB) (*pgx.ConnConfig, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	var cfg *pgx.ConnConfig
	err = c.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("listen: driver connection is %T, not pgx", dc)
		}
		cfg = pc.Conn().Config()
		// The copy keeps the pool connection's notification handler: the
		// listener's notifications would be buffered into that connection
		// (shared by every listener made from it, and never drained). Nil:
		// the listener's connection buffers its own.
		cfg.OnNotification = nil
		return nil
	})
	return cfg, err
}

// Notify sends pg_notify(channel) from a connection of db, outside any
// writer's transaction.
func (waker) Notify(ctx context.Context, db *sql.DB, channel string) error {
	_, err := db.ExecContext(ctx, `SELECT pg_notify($1, '')`, channel)
	return err
}

// Positions. A queue in a table slows down when its deleted rows cannot be
// vacuumed (while a transaction holds an xid or a snapshot: a pg_dump, an
// analytics query, a session idle in transaction): a claim that starts at the
// head of the pending index walks the index entries of every published row
// and checks each in the heap, as none can be marked dead. So claims start
// from a remembered position instead, and a sweep, in a cycle of its own,
// looks below it now and then (relay.Config.SweepInterval).
//
// The position must never pass a row that may still become due below it. The
// rows a writer inserts become visible at its commit, which may come long
// after the insert took its seq and available_at: epochs cover these. The
// first insert of a transaction into the table first takes, for the
// transaction, a shared advisory lock keyed by the table's oid and by its
// epoch (the 10 ms slice of the database's clock it runs in), and its
// available_at is the time after that (clock_timestamp()); the transaction's
// later inserts take none (a transaction-local setting says it holds one):
// their rows come after that epoch's start, which its lock holds the
// frontier at, so a transaction holds one epoch lock per outbox table
// however long it writes. A claim reads pg_locks now and then and learns the
// frontier: the start of the oldest epoch still locked on this table, or,
// with none, the time it looked. Every row
// inserted with an available_at before the frontier, and every row whose seq
// was taken before it, has committed or rolled back by then, so a claim that
// begins later sees it. A writer that read its epoch before that time and
// locks after it inserts after it. A transaction that inserted and goes on
// (a caller's, working after its save) holds the frontier back to where it
// began, and the positions with it; one that only reads, or writes other
// tables, does not.
//
// Unordered claims start at the last row claimed, in (available_at, id)
// order, never above the frontier known before the claim; the relay's
// concurrent batches claim one after the other, each from where the last
// ended. Rows that come back below the position are lowered to (this relay's
// failure marks, whose commit a concurrent claim may not see), rewound for
// (this relay's requeues and outage recoveries; batches whose marks may not
// have committed or that left rows untried, by the relay), or left to the
// sweep, which claims from the head (rows another instance claimed and
// released by rolling back or dying, requeues by another process).
//
// Ordered claims start, per partition, after the last event claimed when the
// claim came back full, else at the settled seq: the highest seq seen (by a
// claim, or in the sequence where the role may read it) before a frontier.
// Each claim also returns where and when the earliest event of its
// partitions waiting for a retry is, and this relay's failure marks add
// theirs: from that time on, claims of the partition start there, so that the
// retry and the events held back behind it are claimed again, until a claim
// that ran after it was due took it. A dead event lowers its partition's
// position (it releases the events behind it); events claimed and neither
// published nor marked failed (a batch out of time, events held back behind a
// failure) lower it at its next claim; taking partitions over rewinds. The
// sweep looks for due events below the positions (a requeue by another
// process, rows written by something else than Herald) and lowers them.

// key is a position in the pending index (available_at, id).
type key struct {
	at time.Time
	id string // canonical text: ordered as the uuid
}

const nilUUID = "00000000-0000-0000-0000-000000000000"

func (k key) less(o key) bool {
	if !k.at.Equal(o.at) {
		return k.at.Before(o.at)
	}
	return k.id < o.id
}

// seqPart is an ordered event's seq and partition.
type seqPart struct {
	seq  int64
	part int32
}

// observation: every seq up to seq was taken before at (database time).
type observation struct {
	at  time.Time
	seq int64
}

const (
	// frontierEvery is how often a claim also reads the frontier.
	frontierEvery = 20 * time.Millisecond
	// maxObservations bounds the observations waiting for the frontier.
	maxObservations = 1024
)

type position struct {
	claimMu  sync.Mutex // held by an unordered claim (not the sweep's) while it runs
	mu       sync.Mutex
	gen      uint64    // bumped by every move back: a claim that began before it does not move forward
	frontier time.Time // database time; zero until known
	checked  time.Time // local time the last frontier read began

	// unordered
	at    key
	known bool

	// ordered
	cur     map[int32]int64     // per partition: claims start here; missing: at the head
	waits   map[int32][]waiting // per partition: retries below or above it, until a claim took them
	out     map[string]seqPart  // claimed, not yet marked
	settled int64               // every seq up to it has committed or rolled back
	obs     []observation
}

// waiting is an event waiting for a retry (or the earliest of several: at or
// above seq), due at due by the database's clock. Claims start at seq from
// dueLocal on, by this process's clock, which is never after due; a claim
// that started there and ran at or after due took it (claimed it, or found it
// held back behind an earlier retry, which is waiting too).
type waiting struct {
	seq           int64
	due, dueLocal time.Time
}

// maxWaits bounds the retries remembered per partition; beyond it they are
// merged into one that starts at the lowest seq from the earliest time until
// the latest is due.
const maxWaits = 64

func newPosition() *position {
	return &position{cur: map[int32]int64{}, waits: map[int32][]waiting{}, out: map[string]seqPart{}}
}

// wait remembers a retry of partition part.
func (p *position) wait(part int32, w waiting) {
	ws := p.waits[part]
	for _, o := range ws {
		if o.seq == w.seq && o.due.Equal(w.due) {
			return // the same (a claim sees it again)
		}
	}
	if len(ws) >= maxWaits {
		m := ws[0]
		for _, o := range ws[1:] {
			m.seq = min(m.seq, o.seq)
			if o.due.After(m.due) {
				m.due = o.due
			}
			if o.dueLocal.Before(m.dueLocal) {
				m.dueLocal = o.dueLocal
			}
		}
		ws = ws[:1]
		ws[0] = m
	}
	p.waits[part] = append(ws, w)
}

// checkDue reports whether this claim reads the frontier.
func (p *position) checkDue() bool {
	if now := time.Now(); now.Sub(p.checked) >= frontierEvery {
		p.checked = now
		return true
	}
	return false
}

// advance takes a frontier read and settles the observations before it.
func (p *position) advance(f sql.NullTime) {
	if !f.Valid || !f.Time.After(p.frontier) {
		return
	}
	p.frontier = f.Time
	kept := p.obs[:0]
	for _, o := range p.obs {
		if o.at.Before(p.frontier) {
			p.settled = max(p.settled, o.seq)
		} else {
			kept = append(kept, o)
		}
	}
	p.obs = kept
}

func (p *position) observe(o observation) {
	if o.seq <= p.settled {
		return
	}
	if len(p.obs) >= maxObservations {
		// Merge pairs: the later time with the lower seq settles later, and less.
		half := p.obs[:0]
		for i := 0; i+1 < len(p.obs); i += 2 {
			half = append(half, observation{p.obs[i+1].at, p.obs[i].seq})
		}
		p.obs = half
	}
	p.obs = append(p.obs, o)
}

type unorderedClaim struct {
	from     *key // nil: the head
	gen      uint64
	check    bool
	frontier time.Time
}

func (p *position) unorderedStart(sweep bool) unorderedClaim {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := unorderedClaim{gen: p.gen, check: p.checkDue(), frontier: p.frontier}
	if !sweep && p.known {
		k := p.at
		st.from = &k
	}
	return st
}

// unorderedDone moves the position after a claim: to its last row when it came
// back full, else to its time (every visible due row was claimed, or locked by
// another instance); never above the frontier known before it.
func (p *position) unorderedDone(st unorderedClaim, sweep bool, last key, full bool, dbNow time.Time, f sql.NullTime) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(f)
	if sweep || st.frontier.IsZero() {
		return
	}
	bound := key{st.frontier, nilUUID}
	if now := (key{dbNow, nilUUID}); now.less(bound) {
		bound = now
	}
	if full && last.less(bound) {
		bound = last
	}
	switch {
	case st.gen == p.gen:
		if !p.known || p.at.less(bound) {
			p.at, p.known = bound, true
		}
	case p.known && bound.less(p.at):
		p.at = bound
	}
}

func (p *position) lowerUnorderedLocked(at time.Time) {
	if k := (key{at, nilUUID}); p.known && k.less(p.at) {
		p.at = k
	}
	p.gen++
}

// failed takes failure marks made at now (database time): their retries are
// due after it; a dead event releases the later events of its aggregate.
func (p *position) failed(fs []store.Failure, now, local time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lowerUnorderedLocked(now)
	for _, f := range fs {
		sp, ok := p.out[f.ID]
		if !ok {
			continue
		}
		delete(p.out, f.ID)
		if f.Dead {
			if c, ok := p.cur[sp.part]; ok && sp.seq < c {
				p.cur[sp.part] = sp.seq
			}
			continue
		}
		if _, ok := p.cur[sp.part]; ok {
			p.wait(sp.part, waiting{seq: sp.seq, due: now.Add(f.Delay), dueLocal: local.Add(f.Delay)})
		}
	}
}

func (p *position) published(ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		delete(p.out, id)
	}
}

func (p *position) rewind() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.known = false
	clear(p.cur)
	clear(p.waits)
	clear(p.out)
	p.gen++
}

type orderedClaim struct {
	lo      int64 // the lowest position of the partitions; 0: the head
	gen     uint64
	check   bool
	settled int64
}

// orderedResult is what an ordered claim returned.
type orderedResult struct {
	rows     []store.Claimed
	seqs     []seqPart
	full     bool
	dbNow    time.Time // the claim's now()
	clock    time.Time // after the claim's snapshot
	frontier sql.NullTime
	waiting  *waiting
	last     *observation // the sequence's last value, where readable
}

func (p *position) orderedStart(owned []int32, now time.Time) orderedClaim {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := make(map[int32]bool, len(owned))
	for _, part := range owned {
		in[part] = true
	}
	// Events the last claim of these partitions returned that were neither
	// published nor marked failed are still pending.
	for id, sp := range p.out {
		if in[sp.part] {
			if c, ok := p.cur[sp.part]; ok && sp.seq < c {
				p.cur[sp.part] = sp.seq
			}
			delete(p.out, id)
		}
	}
	st := orderedClaim{gen: p.gen, check: p.checkDue(), settled: p.settled}
	lo := int64(math.MaxInt64)
	for _, part := range owned {
		c, ok := p.cur[part]
		if !ok {
			return st // lo 0: from the head
		}
		lo = min(lo, c)
		// Retries whose time came, and the events held back behind them.
		for _, w := range p.waits[part] {
			if !now.Before(w.dueLocal) {
				lo = min(lo, w.seq)
			}
		}
	}
	if len(owned) > 0 {
		st.lo = lo
	}
	return st
}

// orderedDone moves the partitions' positions after a claim: past its last
// event when it came back full, else to the settled seq; and notes where the
// earliest retry waits.
func (p *position) orderedDone(st orderedClaim, owned []int32, res orderedResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// The claim read the frontier after its clock: it may settle what the
	// claim saw.
	if res.last != nil {
		p.observe(*res.last)
	}
	next := st.settled + 1
	if n := len(res.seqs); n > 0 {
		p.observe(observation{res.clock, res.seqs[n-1].seq})
		if res.full {
			next = min(next, res.seqs[n-1].seq+1)
		}
	}
	p.advance(res.frontier)
	for _, part := range owned {
		if st.gen == p.gen {
			p.cur[part] = next
		} else if c, ok := p.cur[part]; ok && next < c {
			p.cur[part] = next
		}
		kept := p.waits[part][:0]
		for _, w := range p.waits[part] {
			if w.seq < st.lo || res.dbNow.Before(w.due) {
				kept = append(kept, w)
			}
		}
		p.waits[part] = kept
		if res.waiting != nil {
			p.wait(part, *res.waiting)
		}
	}
	for i, c := range res.rows {
		p.out[c.ID] = res.seqs[i]
	}
}

// positions returns the partitions' positions indexed by partition (0 where
// unknown) and the highest of the owned ones.
func (p *position) positions(owned []int32, partitions int) ([]int64, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int64, partitions)
	var highest int64
	for _, part := range owned {
		if c, ok := p.cur[part]; ok && int(part) < partitions {
			out[part] = c
			highest = max(highest, c)
		}
	}
	return out, highest
}

func (p *position) lowerOrdered(found []seqPart) {
	if len(found) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sp := range found {
		if c, ok := p.cur[sp.part]; ok && sp.seq < c {
			p.cur[sp.part] = sp.seq
		}
	}
	p.gen++
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// tableOID is the table's oid (its identity, whatever schema it is in), as
// the relation t names in the session's search_path.
func tableOID(t ident.Table) string { return quoteLiteral(t.Quoted()) + `::regclass::oid` }

// epochNow is the current epoch (10 ms) by the database's clock.
const epochNow = `floor(extract(epoch FROM clock_timestamp()) * 100)::bigint`

// epochLockSQL takes, for the transaction, the shared lock of the current
// epoch keyed by the table's oid, unless the transaction (or the
// subtransaction it is in) took one on this table already: only its first
// epoch lock is needed (see Positions), and a transaction-local setting
// remembers it. A ROLLBACK TO SAVEPOINT releases a lock taken after the
// savepoint and reverts the setting with it. It yields one row.
func epochLockSQL(t ident.Table) string {
	return fmt.Sprintf(`CASE WHEN coalesce(current_setting(k.name, true), '') = ''
    THEN set_config(k.name, '1', true) || pg_advisory_xact_lock_shared(k.key, (%s %% 2147483648)::int)::text END
  FROM (SELECT 'herald.epoch_' || c.oid AS name, (c.oid::bigint - (c.oid::bigint >> 31 << 32))::int AS key
    FROM (SELECT %s AS oid) c) k`, epochNow, tableOID(t))
}

// frontierSQL is the frontier: the start of the oldest epoch whose lock a
// transaction holds on this table, or the time it looked when none does.
// Epochs are compared modulo 2^31 (248 days); one newer than the clock read
// counts as current.
func frontierSQL(t ident.Table) string {
	return fmt.Sprintf(`(SELECT CASE WHEN count(a.age) = 0 THEN c.t
    ELSE to_timestamp((c.e - max(CASE WHEN a.age > 1073741824 THEN 0 ELSE a.age END))::float8 / 100) END
  FROM (SELECT clock_timestamp() AS t, %s AS e) c
  LEFT JOIN LATERAL (SELECT ((c.e %% 2147483648) - l.objid::bigint + 2147483648) %% 2147483648 AS age
    FROM pg_locks l WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objsubid = 2
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())) a ON true
  GROUP BY c.t, c.e)`, epochNow, tableOID(t))
}

// Retention by partition drop (store.PartitionRetention).

var _ store.PartitionRetention = (*relay)(nil)

// CreatePartitioned creates the outbox partitioned by occurred_at when
// missing (the partitioned set: its 0001, and the later migrations' changes
// to the outbox).
func (r *relay) CreatePartitioned(ctx context.Context, x store.Execer) error {
	return partitionedSchema.CreateOutbox(ctx, x, r.t)
}

// Partitioned reports whether the outbox is a partitioned table.
func (r *relay) Partitioned(ctx context.Context, x store.Execer) (bool, error) {
	var ok bool
	err := store.QueryRow(ctx, x, `SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1))`,
		[]any{r.t.Quoted()}, &ok)
	return ok, err
}

// CleanupDefault deletes a batch of the default partition's published events
// past the retention, as Cleanup does on a plain outbox.
func (r *relay) CleanupDefault(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return lockedDelete(ctx, db, "herald.cleanup:", r.t, r.q.cleanupDefault, float64(olderThan.Milliseconds()), limit)
}

// partitionLockTimeout bounds the wait for the table lock a partition's
// creation or drop takes: writers and claims queue behind it meanwhile.
const partitionLockTimeout = 200 * time.Millisecond

func (r *relay) MaintainPartitions(ctx context.Context, db *sql.DB, interval, olderThan time.Duration) (created, dropped int, err error) {
	var now time.Time
	if err := store.QueryRow(ctx, db, `SELECT now()`, nil, &now); err != nil {
		return 0, 0, err
	}
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	base := now.Truncate(interval)
	for k := -1; k <= 2; k++ {
		start := base.Add(time.Duration(k) * interval)
		name := r.t.Partition(start)
		ok, e := exists(ctx, db, name.Quoted())
		if e != nil {
			keep(e)
			continue
		}
		if ok {
			continue
		}
		// Fails while the default partition holds events of this range
		// (an application clock far ahead): they are cleaned there, row by
		// row, and the range is created once they are gone. Fails too when
		// the outbox's lock is not had within partitionLockTimeout (a
		// reader holds the table): retried at the next round.
		if e := r.createPartition(ctx, db, name, start, start.Add(interval)); e != nil {
			keep(fmt.Errorf("create partition %s: %w", name, e))
			continue
		}
		created++
	}
	// The range partitions, with the upper bounds of their ranges.
	type part struct {
		name string
		upto sql.NullTime
	}
	parts, e := store.Collect(ctx, db, `SELECT c.oid::regclass::text,
  (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1) AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'`, []any{r.t.Quoted()},
		func(rows *sql.Rows) (part, error) {
			var p part
			err := rows.Scan(&p.name, &p.upto)
			return p, err
		})
	if e != nil {
		keep(e)
		return created, dropped, err
	}
	for _, p := range parts {
		if !p.upto.Valid || !p.upto.Time.Before(now.Add(-olderThan)) {
			continue
		}
		ok, e := r.dropPartition(ctx, db, p.name, olderThan)
		if e != nil {
			keep(fmt.Errorf("drop partition %s: %w", p.name, e))
			continue
		}
		if ok {
			dropped++
		}
	}
	return created, dropped, err
}

// lockTimeoutTx begins a transaction whose lock waits give up after
// partitionLockTimeout: DDL that takes a strong lock of the outbox at run
// time queues behind any reader of the table (a pg_dump), and every writer
// queues behind it meanwhile, so it waits briefly and is tried again later.
func lockTimeoutTx(ctx context.Context, db *sql.DB) (*sql.Tx, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, partitionLockTimeout.Milliseconds())); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// createPartition creates the partition name for the range [from, to),
// waiting at most partitionLockTimeout for the outbox's ACCESS EXCLUSIVE
// lock that CREATE TABLE ... PARTITION OF takes.
func (r *relay) createPartition(ctx context.Context, db *sql.DB, name ident.Table, from, to time.Time) error {
	tx, err := lockTimeoutTx(ctx, db)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+name.Quoted()+` PARTITION OF `+r.t.Quoted()+
		` FOR VALUES FROM (`+quoteLiteral(from.UTC().Format(time.RFC3339Nano))+`) TO (`+
		quoteLiteral(to.UTC().Format(time.RFC3339Nano))+`)`); err != nil {
		return err
	}
	return tx.Commit()
}

// dropPartition drops the partition (its name as regclass text) if it holds
// no pending or dead event and none published within olderThan: in one
// transaction, under an ACCESS EXCLUSIVE lock of the whole outbox (so that no
// event can be written to it or made pending between the look and the drop),
// which it waits for at most partitionLockTimeout.
func (r *relay) dropPartition(ctx context.Context, db *sql.DB, name string, olderThan time.Duration) (bool, error) {
	tx, err := lockTimeoutTx(ctx, db)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `LOCK TABLE `+r.t.Quoted()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return false, err
	}
	// Each test has its index: pending, dead, processed.
	var busy bool
	if err := store.QueryRow(ctx, tx, `SELECT EXISTS (SELECT 1 FROM `+name+` WHERE processed_at IS NULL AND dead_at IS NULL)
  OR EXISTS (SELECT 1 FROM `+name+` WHERE dead_at IS NOT NULL)
  OR EXISTS (SELECT 1 FROM `+name+` WHERE processed_at >= now() - $1::float8 * interval '1 millisecond')`,
		[]any{float64(olderThan.Milliseconds())}, &busy); err != nil {
		return false, err
	}
	if busy {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `DROP TABLE `+name); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// scanDead reads a dead event: the claimed columns, last_error, dead_at.
func scanDead(rows *sql.Rows) (store.DeadRow, error) {
	var (
		d       store.DeadRow
		lastErr sql.NullString
	)
	c, err := scanClaimed(rows, &lastErr, &d.DeadAt)
	d.Claimed, d.LastError = c, lastErr.String
	return d, err
}
