package postgres

import (
	"context"
	"fmt"

	"github.com/heraldgo/herald/internal/store"
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
		return &batch{r: r, Marks: store.NewMarks(r, p, db, nil, nil, rows)}, nil
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
	return &batch{r: r, Marks: store.NewMarks(r, p, db, nil, tx, rows), unordered: true}, nil
}

// batch is a claimed batch of PostgreSQL.
type batch struct {
	*store.Marks
	r         *relay
	unordered bool
}

// Commit commits the marks. Rows left pending below the position (untried in
// unordered mode: ordered claims keep what waits in their own positions; a
// failure not recorded) make the next claims start at the head, as does a
// commit that failed (its marks may not have committed).
func (b *batch) Commit(context.Context) error {
	if b.Unrecorded() || (b.unordered && len(b.Untried()) > 0) {
		b.r.pos.rewind()
	}
	if err := b.Marks.Commit(); err != nil {
		b.r.pos.rewind()
		return err
	}
	return nil
}

// Close rolls back what Commit did not commit; the next claims then start at
// the head.
func (b *batch) Close() {
	if b.Marks.Close() {
		b.r.pos.rewind()
	}
}
