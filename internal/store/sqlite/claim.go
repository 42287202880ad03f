package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Claim claims a batch. SQLite has no row locks: an unordered claim holds its
// rows for p.Hold by a row of its own in the claims table (one write per
// batch, not one per event), the batch publishes outside any transaction and
// marks in one of its own, fenced by that row, whose deletion at the commit
// gives back the rows it had no time for. An ordered claim reads the owned
// partitions; its marks are fenced by the partition leases.
func (r *relay) Claim(ctx context.Context, db store.DB, p store.ClaimParams) (store.Batch, error) {
	var (
		rows  []store.Row
		claim int64
		err   error
	)
	if o := p.Ordered; o != nil {
		rows, err = r.claimOrdered(ctx, db, p.Limit, o.Partitions, o.Owned)
	} else {
		rows, claim, err = r.claimHeld(ctx, db, p.Limit, p.Hold)
	}
	if err != nil {
		return nil, err
	}
	return &batch{r: r, Marks: sqlkit.NewMarks(r, p, db, nil, nil, rows), claim: claim}, nil
}

// claimQueries are the claims' statements: the unordered claim's look for
// due rows, its expiry of the claims that ran out, its read of the rows and
// its claim row, and the deletion of that row; the ordered claim and its
// confirmation.
type claimQueries struct {
	any, expire, due, hold, release string
	ordered, confirm                string
}

// newClaimQueries builds the claims' statements with rep (newRelay's).
func newClaimQueries(rep *strings.Replacer) claimQueries {
	var q claimQueries
	// The unordered claim. An event is held by a claim while its seq is in
	// the seqs (a JSON array) of a row of the claims table: one row per batch
	// in flight, so few, each read once per statement (the NOT IN's
	// subquery is not correlated). Its available_at is left as it was: the
	// claim writes one row, whatever the batch's size.
	//
	// any: whether an event is due that no live claim holds, read outside a
	// transaction: an idle relay's polls take no write lock.
	q.any = rep.Replace(`SELECT EXISTS (SELECT 1 FROM {t} WHERE {pending} AND available_at <= {now}
  AND seq NOT IN (SELECT j.value FROM {claims} c, json_each(c.seqs) j WHERE c.expires_at > {now}))`)
	// Then, in one write transaction (BEGIN IMMEDIATE: the DSN's
	// _txlock=immediate; SQLite's one writer makes it the only claim
	// running): the claims that ran out are deleted (their batches' marks
	// now change nothing, and their events are claimed again), the due
	// events no claim holds are read in due order through the pending index
	// (available_at, seq), as on the other databases (a failed event waits
	// behind the others, not ahead of them in every batch), and the batch's
	// claim row is inserted with their seqs, to expire after the hold.
	q.expire = rep.Replace(`DELETE FROM {claims} WHERE expires_at <= {now}`)
	q.due = rep.Replace(`SELECT seq, {cols} FROM {t} WHERE {pending} AND available_at <= {now}
  AND seq NOT IN (SELECT j.value FROM {claims} c, json_each(c.seqs) j)
ORDER BY available_at, seq LIMIT ?`)
	q.hold = rep.Replace(`INSERT INTO {claims} (expires_at, seqs) VALUES ({now} + ?, ?) RETURNING claim`)
	// The batch's commit deletes its claim row (in the marks' transaction):
	// the rows it neither published nor failed are due again at once, at the
	// available_at they had (the claim never moved it).
	q.release = rep.Replace(`DELETE FROM {claims} WHERE claim = ?`)
	// An event is blocked by a pending event of its aggregate before it that
	// is not due (a retry waiting, an event scheduled in line). Asked per
	// candidate through the blockers index (aggregate_type, aggregate_id,
	// seq, of the retries and scheduled events alone: the only events that
	// can be pending and not due; {blocker} is its condition, written as the
	// index has it, so that SQLite uses it), it reads only those of the
	// candidate's aggregate before it; a set of the blocked aggregates
	// built first (a CTE) read every pending event at each claim, and made a
	// burn-down's claims quadratic in the backlog.
	// The events due at once (due_at NULL) are read in seq order through
	// the ordered index, which holds no scheduled event; the scheduled ones
	// due through the scheduled index (few: they are published as they come
	// due); the lowest of both in seq order are claimed. Through one index,
	// every claim stepped over every event scheduled for later. The second
	// orders by +seq: by seq, SQLite scanned the whole table in rowid order
	// for the few due scheduled events (45 ms a claim at 120,000 rows).
	// An event that is neither scheduled nor a retry is due whatever its
	// available_at says (its insert's clock: later than now only after the
	// clock stepped back), as it never holds its aggregate back either:
	// claimed in seq order, not left behind while a later event of its
	// aggregate goes first.
	ordered := `SELECT * FROM (SELECT o.seq, o.id, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.payload, o.metadata,
    o.occurred_at, o.attempts, o.strikes, o.due_at IS NOT NULL AS scheduled
  FROM {t} o
  WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND {due}
    AND o.part_key % ? IN ({owned})
    AND NOT EXISTS (SELECT 1 FROM {t} b
      WHERE b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id AND b.seq < o.seq
        AND b.processed_at IS NULL AND b.dead_at IS NULL AND {blocker} AND b.available_at > {now} AND b.aggregate_id <> '')
  ORDER BY o.seq LIMIT ?)`
	q.ordered = rep.Replace(strings.Replace(ordered, "{due}", "o.due_at IS NULL AND (o.attempts = 0 OR o.available_at <= {now})", 1) + `
UNION ALL
` + strings.Replace(strings.Replace(ordered, "{due}", "o.due_at IS NOT NULL AND o.due_at <= {now} AND o.available_at <= {now}", 1),
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
	return q
}

// claim runs the claim q and returns its rows in the order q returns them;
// scheduled: q returns whether the row is a scheduled event last.
func (r *relay) claim(ctx context.Context, x store.Execer, scheduled bool, q string, args ...any) ([]store.Row, error) {
	return sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Row, error) {
		var (
			c                 store.Row
			payload, metadata string
			occurred          int64
		)
		dest := []any{&c.Seq, &c.ID, &c.Type, &c.Version, &c.AggregateType, &c.AggregateID, &c.Topic,
			&payload, &metadata, &occurred, &c.Attempts, &c.Strikes}
		if scheduled {
			dest = append(dest, &c.Scheduled)
		}
		err := rows.Scan(dest...)
		c.Payload, c.Metadata, c.OccurredAt = []byte(payload), []byte(metadata), time.UnixMicro(occurred).UTC()
		return c, err
	})
}

// claimHeld claims up to limit due events, in due order, for hold: it
// returns them with the claim row that holds them (its claim, their Lease,
// the fencing token of their marks; 0 when none was due). Nobody else claims
// them until the row is deleted: by the batch's commit, or by a claim after
// it expired (a relay that died, or was paused past it).
func (r *relay) claimHeld(ctx context.Context, db store.DB, limit int, hold time.Duration) ([]store.Row, int64, error) {
	var due bool
	if err := sqlkit.QueryRow(ctx, db, r.claims.any, nil, &due); err != nil || !due {
		return nil, 0, err
	}
	var (
		rows  []store.Row
		claim int64
	)
	err := sqlkit.InTx(ctx, db, nil, func(tx store.Execer) error {
		if _, err := tx.ExecContext(ctx, r.claims.expire); err != nil {
			return fmt.Errorf("expire claims: %w", err)
		}
		var err error
		if rows, err = r.claim(ctx, tx, false, r.claims.due, limit); err != nil || len(rows) == 0 {
			return err
		}
		seqs := make([]int64, len(rows))
		for i, c := range rows {
			seqs[i] = c.Seq
		}
		return sqlkit.QueryRow(ctx, tx, r.claims.hold, []any{hold.Microseconds(), sqlkit.JSONInts(seqs)}, &claim)
	})
	if err != nil {
		return nil, 0, err
	}
	for i := range rows {
		rows[i].Lease = claim
	}
	return rows, claim, nil
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
	rows, err := r.claim(ctx, x, true, q, args...)
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
