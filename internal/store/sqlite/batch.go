package sqlite

import (
	"context"
	"fmt"

	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// batch is a claimed batch of SQLite.
type batch struct {
	*sqlkit.Marks
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
