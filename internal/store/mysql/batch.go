package mysql

import (
	"context"

	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// batch is a claimed batch of MySQL: its marks, committed with the rows the
// batch did not mark unlocked, due as they were.
type batch struct{ *sqlkit.Marks }

// Commit commits the marks.
func (b batch) Commit(context.Context) error { return b.Marks.Commit() }

// Close rolls back what Commit did not commit.
func (b batch) Close() { b.Marks.Close() }
