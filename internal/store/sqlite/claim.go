package sqlite

import (
	"context"
	"fmt"

	"github.com/heraldgo/herald/internal/store"
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
	return &batch{r: r, Marks: store.NewMarks(r, p, db, nil, nil, rows), leased: p.Ordered == nil}, nil
}

// batch is a claimed batch of SQLite.
type batch struct {
	*store.Marks
	r      *relay
	leased bool
}

// Commit releases the leases of the rows the batch had no time for (due again
// at about when they were due before) and commits the marks.
func (b *batch) Commit(ctx context.Context) error {
	if untried := b.Untried(); b.leased && len(untried) > 0 {
		tx, err := b.Tx(ctx)
		if err != nil {
			return err
		}
		if err := b.r.unlease(ctx, tx, untried); err != nil {
			return fmt.Errorf("unlease: %w", err)
		}
	}
	return b.Marks.Commit()
}

// Close rolls back marks that were not committed; the leased rows come back
// when their leases end.
func (b *batch) Close() { b.Marks.Close() }
