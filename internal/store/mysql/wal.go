package mysql

import (
	"github.com/heraldgo/herald/internal/store"
)

// WALOutbox returns store.ErrNotSupported: the outbox is a table here.
func (Driver) WALOutbox(string) (store.Outbox, error) { return nil, store.ErrNotSupported }

// WAL returns nil: the outbox is a table here.
func (Driver) WAL() store.WAL { return nil }
