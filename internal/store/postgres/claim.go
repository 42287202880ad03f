package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Claim claims a batch. Unordered: the due rows from the claim position (see
// position; from the head with p.FromHead) locked FOR UPDATE SKIP LOCKED in a
// transaction the batch keeps while it publishes and marks in. Ordered: the
// owned partitions read from their positions without locks; the marks,
// fenced by the partition leases, in a transaction of their own. The batch
// keeps the position where its marks leave it, and forgets it (the next
// claims start at the head) when rows it claimed may still be pending below
// it: a batch ended without its marks, rows it had no time for (unordered),
// or a failure the database refused to record.
func (r *relay) Claim(ctx context.Context, db store.DB, p store.ClaimParams) (store.Batch, error) {
	if o := p.Ordered; o != nil {
		rows, err := r.claimOrdered(ctx, db, p.Limit, o.Partitions, o.Owned, o.Fence)
		if err != nil {
			return nil, err
		}
		return &batch{r: r, Marks: sqlkit.NewMarks(r, p, db, nil, nil, rows)}, nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	rows, err := r.claimLocked(ctx, tx, p.Limit, p.FromHead)
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return &batch{r: r, Marks: sqlkit.NewMarks(r, p, db, nil, tx, rows), unordered: true}, nil
}

// The ordered claim's columns: its own (orderedMetaCols: the clock, the
// frontier...), then those of a claimed row (orderedClaimCols: claimCols, its
// seq, partition and whether it is scheduled).
const (
	orderedMetaCols  = 9
	orderedClaimCols = 14
)

// nulls is n NULLs, a row's columns that another UNION ALL branch fills.
func nulls(n int) string {
	return strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ")
}

// claimQueries are the claims' statements: the unordered claim's, and
// ordered mode's (the claim's, the probe's of the sweep and the
// confirmation's), made at their first use: a fleet makes a relay per
// tenant, most of them in one mode.
type claimQueries struct {
	locked  [2]string // by [frontier check]
	ordered func() orderedQueries
}

// orderedQueries are ordered mode's statements.
type orderedQueries struct {
	claim          [2]string // by [frontier check]
	probe, confirm string
}

func newClaimQueries(t ident.Table, rep *strings.Replacer) claimQueries {
	frontier := [2]string{`NULL::timestamptz`, frontierSQL(t)}
	// The pending index (available_at, id) serves this scan in order, from
	// the position ($2, $3; the head when NULL) instead of the head, where
	// the index entries of published rows lie until vacuum removes them;
	// locked rows are skipped, so instances share the work. The one row of
	// m comes back even when nothing is claimed (c's columns NULL).
	locked := rep.Replace(`SELECT m.dbnow, m.frontier, c.* FROM
  (SELECT now() AS dbnow, {frontier} AS frontier, set_config('synchronous_commit', 'off', true) AS herald_async) m
LEFT JOIN LATERAL (SELECT {cols}, o.available_at FROM {t} o
  WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
    AND (o.available_at, o.id) >= (coalesce($2::timestamptz, '-infinity'), coalesce($3::uuid, '00000000-0000-0000-0000-000000000000'))
  ORDER BY o.available_at, o.id LIMIT $1 FOR UPDATE OF o SKIP LOCKED) c ON true`)
	var q claimQueries
	for check := range 2 {
		q.locked[check] = strings.Replace(locked, "{frontier}", frontier[check], 1)
	}
	q.ordered = sync.OnceValue(func() orderedQueries { return newOrderedQueries(t, rep, frontier) })
	return q
}

func newOrderedQueries(t ident.Table, rep *strings.Replacer, frontier [2]string) orderedQueries {
	var q orderedQueries
	// The last seq taken, where the role may read the sequence (NULL
	// otherwise): every seq up to it was taken before the clock read after it,
	// and the frontier, read after both, may settle it.
	lastSeq := [2]string{`NULL::bigint`, `(SELECT CASE WHEN has_sequence_privilege(s.oid, 'SELECT,USAGE') THEN pg_sequence_last_value(s.oid) END
      FROM (SELECT pg_get_serial_sequence(` + quoteLiteral(t.Quoted()) + `, 'seq')::regclass AS oid) s)`}
	for check := range 2 {
		fr := strings.NewReplacer("{frontier}", frontier[check], "{lastseq}", lastSeq[check],
			"{nulls}", nulls(orderedClaimCols), "{metanulls}", nulls(orderedMetaCols))
		// Only this instance reads its partitions, so no row locks. The
		// candidates are the first $1 due events of the partitions in seq
		// order from the start; of them, an event is claimed unless an
		// earlier event of its aggregate is pending and not due (a retry, or
		// an event scheduled in line): "blocked", looked up per aggregate of
		// the candidates through the aggregate index, below their last
		// candidate, so that the claim's cost does not grow with the events
		// scheduled for later or with the failing ones. (As one anti-join
		// over every pending event not due, a million scheduled events made
		// each claim read a million rows; as a NOT EXISTS per row, the
		// planner's estimate grew enough to JIT-compile every claim.)
		// An event below the start holds its aggregate's later candidates
		// back too: it is pending, so it will be claimed, and they must not
		// go first. Such an event that is due was passed while it was held
		// back itself, behind an event that has gone since (a cancelled
		// scheduled event, which brings nothing back): "stranded", the
		// next claim starts there.
		// "waiting" is where and when the earliest retry of the partitions
		// is, through the retry index, for the claim that will have to start
		// there; scheduled events need no such note: the start takes the
		// lowest due scheduled event pending, through the scheduled index
		// (an event moved to an earlier time keeps its seq).
		// The candidates due at once are read through the ordered index
		// (seq), which holds no scheduled event, from the start; the
		// scheduled ones that are due through the scheduled index; the
		// lowest of both in seq order are the candidates (through one index,
		// a claim from the head stepped over every event scheduled for
		// later). The due time is a filter, written as an expression, so that
		// the planner, which finds few rows due where many are scheduled for
		// later, does not read and sort every due event through the pending
		// index instead (27 ms a claim at 20,000 due under 1,000,000
		// scheduled, 1 ms this way). set_config, unsafe in parallel, keeps
		// the claim from starting parallel workers, which its estimates
		// asked for (30 ms to start them, for 100 rows).
		// The claim's own columns (its clock, the frontier, the waiting
		// retry...) come back once, in a row of their own (whose claimed
		// columns are NULL, as the claimed rows' are the claim's), not in
		// every row: 1,000 rows repeated 4 timestamps to format and parse.
		// The scan starts at $4, or at the lowest of the retries below it
		// ($5, due at $6 by the database's clock) that its now() finds due:
		// $4 was chosen by this process's clock before that now(), and a
		// retry that came due in between (the claim waited for a
		// connection, the process was stopped) would otherwise lie below
		// the scan, due, so not blocking its aggregate, whose later events
		// were then claimed first. (position.startAt is the same in Go.)
		q.claim[check] = fr.Replace(rep.Replace(`WITH start AS MATERIALIZED (
  SELECT set_config('herald.claim', 'ordered', true) AS serial, least($4::bigint, (SELECT min(w.seq) FROM unnest($5::bigint[], $6::timestamptz[]) AS w(seq, due) WHERE w.due <= now()),
    (SELECT min(o.seq) FROM {t} o WHERE o.due_at IS NOT NULL AND o.due_at <= now() AND {pending} AND o.available_at <= now()
       AND {part} = ANY($3::int[]))) AS lo),
cand AS MATERIALIZED (
  SELECT * FROM (
    (SELECT {cols}, o.seq, p.part, false AS scheduled FROM {t} o, LATERAL (SELECT {part} AS part) p
     WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.due_at IS NULL AND o.available_at + interval '0 s' <= now()
       AND o.seq >= (SELECT lo FROM start) AND p.part = ANY($3::int[])
     ORDER BY o.seq LIMIT $1)
    UNION ALL
    (SELECT {cols}, o.seq, p.part, true FROM {t} o, LATERAL (SELECT {part} AS part) p
     WHERE o.due_at IS NOT NULL AND o.due_at <= now() AND o.processed_at IS NULL AND o.dead_at IS NULL
       AND o.available_at <= now() AND o.seq >= (SELECT lo FROM start) AND p.part = ANY($3::int[])
     ORDER BY o.seq LIMIT $1)) u
  ORDER BY u.seq LIMIT $1),
blocked AS MATERIALIZED (
  SELECT a.aggregate_type, a.aggregate_id, b.seq, b.due
  FROM (SELECT c.aggregate_type, c.aggregate_id, max(c.seq) AS last FROM cand c WHERE c.aggregate_id <> ''
        GROUP BY c.aggregate_type, c.aggregate_id) a
  CROSS JOIN LATERAL (SELECT o.seq, o.available_at <= now() AS due FROM {t} o
    WHERE o.aggregate_type = a.aggregate_type AND o.aggregate_id = a.aggregate_id AND o.seq < a.last
      AND {pending} AND (o.available_at > now() OR o.seq < (SELECT lo FROM start))
    ORDER BY o.seq LIMIT 1) b),
waiting AS MATERIALIZED (
  SELECT min(o.seq) AS seq, min(o.available_at) AS at FROM {t} o
  WHERE {pending} AND o.attempts > 0 AND o.available_at > now() AND {part} = ANY($3::int[]))
SELECT m.dbnow, m.frontier, m.lastseq, m.clock, m.lastcand, m.candidates, m.stranded, w.seq, w.at, {nulls} FROM
  (SELECT now() AS dbnow, l.lastseq, l.clock, {frontier} AS frontier, (SELECT max(seq) FROM cand) AS lastcand, (SELECT count(*) FROM cand) AS candidates,
     (SELECT min(b.seq) FROM blocked b WHERE b.due) AS stranded
   FROM (SELECT {lastseq} AS lastseq, clock_timestamp() AS clock) l) m
  CROSS JOIN waiting w
UNION ALL
SELECT {metanulls}, c.* FROM cand c WHERE NOT EXISTS (SELECT 1 FROM blocked b
    WHERE b.aggregate_type = c.aggregate_type AND b.aggregate_id = c.aggregate_id AND b.seq < c.seq)`))
	}
	// The confirmation of an ordered batch's scheduled events ($1): those
	// still pending and due, and not locked by a writer (a Reschedule whose
	// transaction deleted or moved one before it came due and has not
	// ended, which the claim's snapshot could not see).
	q.confirm = rep.Replace(`SELECT o.id::text FROM {t} o
WHERE o.id = ANY($1::uuid[]) AND o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
FOR SHARE OF o SKIP LOCKED`)
	// The sweep of ordered mode: due events of the partitions below their
	// position ($5, by partition), which lowers it.
	// The events due at once and the due scheduled ones, each through its
	// index, as the claim reads them.
	q.probe = rep.Replace(`SELECT * FROM (
  (SELECT o.seq, {part} FROM {t} o
   WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.due_at IS NULL AND o.available_at + interval '0 s' <= now()
     AND o.seq < $4::bigint AND {part} = ANY($3::int[]) AND o.seq < ($5::bigint[])[{part} + 1]
   ORDER BY o.seq LIMIT $1)
  UNION ALL
  (SELECT o.seq, {part} FROM {t} o
   WHERE o.due_at IS NOT NULL AND o.due_at <= now() AND o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
     AND o.seq < $4::bigint AND {part} = ANY($3::int[]) AND o.seq < ($5::bigint[])[{part} + 1]
   ORDER BY o.seq LIMIT $1)) u
ORDER BY 1 LIMIT $1`)
	return q
}

func scanClaimed(rows *sql.Rows, extra ...any) (store.Row, error) {
	var (
		c                 store.Row
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

func (n *nullClaimed) claimed() (store.Row, bool) {
	if !n.id.Valid {
		return store.Row{}, false
	}
	return store.Row{
		ID: n.id.String, Type: n.typ.String, AggregateType: n.aggType.String, AggregateID: n.aggID.String,
		Topic: n.topic.String, Version: int(n.version.Int32), Attempts: int(n.attempts.Int32), Strikes: int(n.strikes.Int32),
		Payload: []byte(n.payload.String), Metadata: []byte(n.metadata.String), OccurredAt: n.occurred.Time,
	}, true
}

// claimLocked claims from the position (see position): rows at or above it in
// (available_at, id) order, or from the head when sweeping (leaving the
// position alone). The relay's concurrent batches claim one after the other,
// each from where the last ended, instead of each stepping over the rows the
// others locked.
func (r *relay) claimLocked(ctx context.Context, tx store.Execer, limit int, sweep bool) ([]store.Row, error) {
	if !sweep {
		r.pos.claimMu.Lock()
		defer r.pos.claimMu.Unlock()
	}
	st := r.pos.unorderedStart(sweep)
	var loAt, loID any
	if st.from != nil {
		loAt, loID = st.from.at, st.from.id
	}
	rows, err := tx.QueryContext(ctx, r.claims.locked[btoi(st.check)], limit, loAt, loID)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var (
		out      []store.Row
		last     key
		dbNow    time.Time
		frontier sql.NullTime
	)
	var (
		n    nullClaimed
		at   sql.NullTime
		dest = n.dest([]any{&dbNow, &frontier}, &at) // one for every row: claimed copies out
	)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
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
	r.pos.unorderedDone(st, sweep, last, len(out) >= limit, dbNow, frontier)
	return out, nil
}

// orderedMeta is the ordered claim's own row: its clocks (now(), and
// clock_timestamp() after its snapshot), the frontier, the last seq taken,
// the last candidate's seq (returned or held back) and how many there were,
// a due event below the start that holds a candidate back (stranded), and
// where and when the earliest retry of the partitions waits.
type orderedMeta struct {
	dbNow, clock, frontier, waitAt              sql.NullTime
	lastSeq, lastCand, cands, stranded, waitSeq sql.NullInt64
}

// claimOrdered claims from the lowest position of the owned partitions (see
// position), in seq order.
func (r *relay) claimOrdered(ctx context.Context, x store.Execer, limit, partitions int, owned []int32, fence *store.Fence) ([]store.Row, error) {
	if fence != nil {
		r.pos.leased(sqlkit.FenceParts(fence))
	}
	st := r.pos.orderedStart(owned) // its clock read before the database's now: never later
	rows, err := x.QueryContext(ctx, r.claims.ordered().claim[btoi(st.check)], limit, partitions, owned, st.lo, st.below, st.belowAt)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var (
		out   []store.Row
		seqs  []seqPart
		m     orderedMeta // from the claim's own row
		row   orderedMeta // NULL in the claimed rows
		n     nullClaimed
		seq   sql.NullInt64
		part  sql.NullInt32
		sched sql.NullBool
		// One for every row: claimed copies the row out.
		dest  = n.dest([]any{&row.dbNow, &row.frontier, &row.lastSeq, &row.clock, &row.lastCand, &row.cands, &row.stranded, &row.waitSeq, &row.waitAt}, &seq, &part, &sched)
		metas int
	)
	if len(dest) != orderedMetaCols+orderedClaimCols {
		return nil, fmt.Errorf("ordered claim: %d columns scanned, the statement has %d", len(dest), orderedMetaCols+orderedClaimCols)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if row.dbNow.Valid {
			m, metas = row, metas+1
		}
		if c, ok := n.claimed(); ok {
			c.Scheduled = sched.Bool
			out = append(out, c)
			seqs = append(seqs, seqPart{seq.Int64, part.Int32})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if metas != 1 {
		return nil, fmt.Errorf("ordered claim: %d rows of the claim's own columns, want 1", metas)
	}
	dbNow, clock, frontier := m.dbNow.Time, m.clock.Time, m.frontier
	lastSeq, lastCand, cands, stranded, waitSeq, waitAt := m.lastSeq, m.lastCand, int(m.cands.Int64), m.stranded, m.waitSeq, m.waitAt
	// In seq order, as the relay publishes each aggregate's events.
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(seqs[a].seq, seqs[b].seq) })
	sorted, sortedSeqs := make([]store.Row, len(out)), make([]seqPart, len(out))
	for i, j := range idx {
		sorted[i], sortedSeqs[i] = out[j], seqs[j]
	}
	done := orderedResult{rows: sorted, seqs: sortedSeqs, full: cands >= limit, lastCand: lastCand.Int64, stranded: stranded.Int64, dbNow: dbNow, clock: clock, frontier: frontier}
	if lastSeq.Valid {
		done.last = &observation{clock, lastSeq.Int64}
	}
	if waitSeq.Valid && waitAt.Valid {
		w := st.waitingAt(waitSeq.Int64, waitAt.Time, dbNow)
		done.waiting = &w
	}
	r.pos.orderedDone(st, owned, done)
	// Rows held back here (a scheduled event a writer holds, and the later
	// events of its aggregate) were claimed as far as the position goes:
	// left neither published nor failed, they lower it at the next claim,
	// which reads them again; the other aggregates' rows are returned.
	return sqlkit.Confirm(ctx, x, sorted, func(sched []store.Row) (string, []any) {
		ids := make([]string, len(sched))
		for i, c := range sched {
			ids[i] = c.ID
		}
		return r.claims.ordered().confirm, []any{ids}
	})
}

// Sweep is the sweep of ordered mode: it looks for due events of the owned
// partitions below their positions (events that became due in a way the
// claims do not see: written by something else than Herald, requeued in a
// long transaction) and lowers the positions to them.
func (r *relay) Sweep(ctx context.Context, x store.Execer, partitions int, owned []int32) (int, error) {
	below, highest := r.pos.positions(owned, partitions)
	if highest <= 0 {
		return 0, nil
	}
	found, err := sqlkit.Collect(ctx, x, r.claims.ordered().probe, []any{64, partitions, owned, highest, below}, func(rows *sql.Rows) (seqPart, error) {
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
