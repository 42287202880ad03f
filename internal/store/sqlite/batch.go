package sqlite

import (
	"context"
	"fmt"

	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// batch is a claimed batch of SQLite.
type batch struct {
	*sqlkit.Marks
	r *relay
	// claim is the unordered batch's row in the claims table (0: none, an
	// ordered batch or one that claimed nothing).
	claim int64
}

// Commit deletes the batch's claim row, in the marks' transaction, and
// commits the marks: the rows the batch had no time for are due again at
// once, at the available_at they had before the claim (it never moved it);
// a failed one waits for its retry. A claim row that a later claim deleted
// (the batch ran past its hold) is gone already, and so are the marks'
// effects: they were fenced by it.
func (b *batch) Commit(ctx context.Context) error {
	if b.claim != 0 {
		tx, err := b.Tx(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, b.r.claims.release, b.claim); err != nil {
			return fmt.Errorf("release the claim: %w", err)
		}
	}
	return b.Marks.Commit()
}

// Close rolls back marks that were not committed; the claimed rows come back
// when the claim expires (a later claim deletes its row).
func (b *batch) Close() { b.Marks.Close() }
