package postgres

import (
	"context"

	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// batch is a claimed batch of PostgreSQL.
type batch struct {
	*sqlkit.Marks
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
