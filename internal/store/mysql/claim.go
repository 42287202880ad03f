package mysql

import (
	"context"
	"fmt"

	"github.com/heraldgo/herald/internal/store"
)

// Claim claims a batch. Unordered: the due rows locked (FOR UPDATE SKIP
// LOCKED) in a READ COMMITTED transaction the batch keeps while it publishes
// and marks in, so no gap lock holds back the application's inserts. Ordered:
// the owned partitions read without locks; the marks, fenced by the partition
// leases, in a READ COMMITTED transaction of their own.
func (r *relay) Claim(ctx context.Context, db store.DB, p store.ClaimParams) (store.Batch, error) {
	if o := p.Ordered; o != nil {
		rows, err := r.claimOrdered(ctx, db, p.Limit, o.Partitions, o.Owned)
		if err != nil {
			return nil, err
		}
		return batch{store.NewMarks(r, p, db, readCommitted, nil, rows)}, nil
	}
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	rows, err := r.claimLocked(ctx, tx, p.Limit)
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return batch{store.NewMarks(r, p, db, readCommitted, tx, rows)}, nil
}

// batch is a claimed batch of MySQL: its marks, committed with the rows the
// batch did not mark unlocked, due as they were.
type batch struct{ *store.Marks }

// Commit commits the marks.
func (b batch) Commit(context.Context) error { return b.Marks.Commit() }

// Close rolls back what Commit did not commit.
func (b batch) Close() { b.Marks.Close() }
