package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Claim claims a batch. SQLite has no row locks: an unordered claim leases its
// rows for p.Hold in a statement of its own, the batch publishes outside any
// transaction and marks in one of its own, fenced by the claim's lease, and
// gives back the rows it had no time for. An ordered claim reads the owned
// partitions; its marks are fenced by the partition leases.
func (r *relay) Claim(ctx context.Context, db store.DB, p store.ClaimParams) (store.Batch, error) {
	var (
		rows []store.Row
		err  error
	)
	if o := p.Ordered; o != nil {
		rows, err = r.claimOrdered(ctx, db, p.Limit, o.Partitions, o.Owned)
	} else {
		rows, err = r.claimLeased(ctx, db, p.Limit, p.Hold)
	}
	if err != nil {
		return nil, err
	}
	return &batch{r: r, Marks: sqlkit.NewMarks(r, p, db, nil, nil, rows), leased: p.Ordered == nil}, nil
}

// claimQueries are the claims' statements: the unordered claim's read of the
// due rows and its lease, the ordered claim and its confirmation, and the
// release of the leases a batch had no time for.
type claimQueries struct {
	due, leased, unlease string
	ordered, confirm     string
}

// newClaimQueries builds the claims' statements with rep (newRelay's).
func newClaimQueries(rep *strings.Replacer) claimQueries {
	var q claimQueries
	// The due rows in due order, then one statement, under SQLite's single
	// writer, that leases those still due: the rows it moves past the lease
	// are this claim's alone. The claim keeps the due order, as on the other
	// databases (a failed event waits behind the others, not ahead of them in
	// every batch); RETURNING gives neither that order nor the old
	// available_at, hence the read first.
	q.due = rep.Replace(`SELECT seq FROM {t} WHERE {pending} AND available_at <= {now} ORDER BY available_at, seq LIMIT ?`)
	q.leased = rep.Replace(`UPDATE {t} SET available_at = {now} + ?
WHERE seq IN (SELECT value FROM json_each(?)) AND {pending} AND available_at <= {now}
RETURNING seq, {cols}, available_at`)
	// An event is blocked by a pending event of its aggregate before it that
	// is not due (a retry waiting). Asked per candidate through the aggregate
	// index (aggregate_type, aggregate_id, seq), it reads only the events of
	// the candidate's aggregate before it; a set of the blocked aggregates
	// built first (a CTE) read every pending event at each claim, and made a
	// burn-down's claims quadratic in the backlog.
	// The events due at once (due_at NULL) are read in seq order through
	// the ordered index, which holds no scheduled event; the scheduled ones
	// due through the scheduled index (few: they are published as they come
	// due); the lowest of both in seq order are claimed. Through one index,
	// every claim stepped over every event scheduled for later. The second
	// orders by +seq: by seq, SQLite scanned the whole table in rowid order
	// for the few due scheduled events (45 ms a claim at 120,000 rows).
	ordered := `SELECT * FROM (SELECT o.seq, o.id, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.payload, o.metadata,
    o.occurred_at, o.attempts, o.strikes, o.due_at IS NOT NULL AS scheduled
  FROM {t} o
  WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND {due} AND o.available_at <= {now}
    AND o.part_key % ? IN ({owned})
    AND NOT EXISTS (SELECT 1 FROM {t} b
      WHERE b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id AND b.seq < o.seq
        AND b.processed_at IS NULL AND b.dead_at IS NULL AND b.available_at > {now} AND b.aggregate_id <> '')
  ORDER BY o.seq LIMIT ?)`
	q.ordered = rep.Replace(strings.Replace(ordered, "{due}", "o.due_at IS NULL", 1) + `
UNION ALL
` + strings.Replace(strings.Replace(ordered, "{due}", "o.due_at IS NOT NULL AND o.due_at <= {now}", 1),
		"ORDER BY o.seq", "ORDER BY +o.seq", 1) + `
ORDER BY seq LIMIT ?`)
	// The ordered claim reads without a lock, in a snapshot: a Reschedule
	// whose transaction deleted or moved a scheduled row it read, and has not
	// committed, is not seen. This no-op write of the batch's scheduled rows
	// (by seq) waits for the write lock, so for that transaction's end, and
	// returns the ids of those still pending and due.
	q.confirm = rep.Replace(`UPDATE {t} SET due_at = due_at
WHERE seq IN (SELECT value FROM json_each(?)) AND {pending} AND available_at <= {now}
RETURNING id`)
	// The rows a batch had no time for, due again at about when they were
	// due before (relay.unlease).
	q.unlease = rep.Replace(`UPDATE {t} SET available_at = min(coalesce(last_failed_at, created_at), {now})
WHERE {pending} AND ` + byLease)
	return q
}

// claim runs the claim q and returns its rows in seq order, or in the order of
// rank (by seq) when given; leased: q returns the lease it set last;
// scheduled: q returns whether the row is a scheduled event last.
func (r *relay) claim(ctx context.Context, x store.Execer, rank map[int64]int, leased, scheduled bool, q string, args ...any) ([]store.Row, error) {
	out, err := sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Row, error) {
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
		if scheduled {
			dest = append(dest, &c.Scheduled)
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
	due, err := sqlkit.Column[int64](ctx, x, r.claims.due, limit)
	if err != nil || len(due) == 0 {
		return nil, err
	}
	rank := make(map[int64]int, len(due))
	for i, seq := range due {
		rank[seq] = i
	}
	return r.claim(ctx, x, rank, true, false, r.claims.leased, lease.Microseconds(), sqlkit.JSONInts(due))
}

// unlease makes the rows due again at about the time they were due before
// the claim (their insert, or their last failure: the lease overwrote the
// exact time), not now: else rows a batch had no time for would go behind
// the events that failed in it, and again every batch, never tried while a
// failing event comes first (the other databases release such rows
// untouched). Only rows that still hold the claim's lease.
func (r *relay) unlease(ctx context.Context, x store.Execer, keys []sqlkit.Key) error {
	return sqlkit.ExecSeqLeases(ctx, x, r.claims.unlease, keys)
}

// claimOrdered returns up to limit due events of the owned partitions, in
// insertion order, leaving out those behind an earlier event of their
// aggregate that waits for a retry, and without the scheduled events that
// confirm did not find still due nor the later events of their aggregates.
func (r *relay) claimOrdered(ctx context.Context, x store.Execer, limit, partitions int, owned []int32) ([]store.Row, error) {
	if len(owned) == 0 {
		return nil, nil
	}
	q, args := sqlkit.OrderedClaim(r.claims.ordered, limit, partitions, owned)
	rows, err := r.claim(ctx, x, nil, false, true, q, args...)
	if err != nil {
		return nil, err
	}
	return r.confirm(ctx, x, rows)
}

// confirm returns rows (in seq order) without the scheduled ones that are no
// longer pending and due once the transactions writing them have ended (a
// Reschedule that cancelled or moved one after the claim's read): such a row
// and every later row of its aggregate are left for the next claim, which
// reads them again (sqlkit.Confirm). It writes only when a row is scheduled.
func (r *relay) confirm(ctx context.Context, x store.Execer, rows []store.Row) ([]store.Row, error) {
	out, err := sqlkit.Confirm(ctx, x, rows, func(sched []store.Row) (string, []any) {
		seqs := make([]int64, len(sched))
		for i, c := range sched {
			seqs[i] = c.Seq
		}
		return r.claims.confirm, []any{sqlkit.JSONInts(seqs)}
	})
	if err != nil {
		return nil, fmt.Errorf("confirm scheduled events: %w", err)
	}
	return out, nil
}
