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
	due, err := sqlkit.Column[int64](ctx, x, r.q.dueLeased, limit)
	if err != nil || len(due) == 0 {
		return nil, err
	}
	rank := make(map[int64]int, len(due))
	for i, seq := range due {
		rank[seq] = i
	}
	return r.claim(ctx, x, rank, true, false, r.q.claimLeased, lease.Microseconds(), sqlkit.JSONInts(due))
}

// unlease makes the rows due again at about the time they were due before
// the claim (their insert, or their last failure: the lease overwrote the
// exact time), not now: else rows a batch had no time for would go behind
// the events that failed in it, and again every batch, never tried while a
// failing event comes first (the other databases release such rows
// untouched). Only rows that still hold the claim's lease.
func (r *relay) unlease(ctx context.Context, x store.Execer, keys []sqlkit.Key) error {
	return sqlkit.ExecSeqLeases(ctx, x, r.q.unlease, keys)
}

// claimOrdered returns up to limit due events of the owned partitions, in
// insertion order, leaving out those behind an earlier event of their
// aggregate that waits for a retry, and without the scheduled events that
// confirm did not find still due nor the later events of their aggregates.
func (r *relay) claimOrdered(ctx context.Context, x store.Execer, limit, partitions int, owned []int32) ([]store.Row, error) {
	if len(owned) == 0 {
		return nil, nil
	}
	q := strings.ReplaceAll(r.q.claimOrdered, "{owned}", sqlkit.Placeholders(len(owned)))
	branch := append(append([]any{partitions}, sqlkit.Anys(owned)...), limit)
	args := append(append(append([]any{}, branch...), branch...), limit)
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
		return r.q.confirm, []any{sqlkit.JSONInts(seqs)}
	})
	if err != nil {
		return nil, fmt.Errorf("confirm scheduled events: %w", err)
	}
	return out, nil
}
