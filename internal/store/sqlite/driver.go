// Package sqlite is Herald's storage for SQLite 3.42 and newer: all of its SQL,
// and its migrations. It works through database/sql on any SQLite driver GORM
// opens (Herald tests it with the pure-Go modernc.org/sqlite).
//
// SQLite has one writer at a time and no row locks. Herald relies on that: a
// write transaction must take the write lock when it begins (BEGIN IMMEDIATE:
// the drivers' _txlock=immediate), so that writers queue on the busy timeout
// instead of failing with SQLITE_BUSY when a deferred transaction's snapshot
// went stale; then the writers of one aggregate are serialized with no lock of
// Herald's own. DSN is the DSN with those settings and WAL, which
// internal/drivers checks a connection for (outboxhook.ErrSQLiteSettings).
// Times are UTC unix microseconds in INTEGER columns.
package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Now is the database's current time in unix microseconds.
const Now = `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`

// Driver is the SQLite implementation of store.Driver.
type Driver struct{}

var _ store.Driver = Driver{}

// Name returns "sqlite".
func (Driver) Name() string { return "sqlite" }

// Caps: none (no LISTEN/NOTIFY, no row locks: an unordered claim holds its
// rows by a claim row of its own; no claim position, no partitions).
func (Driver) Caps() store.Caps { return 0 }

// LockingTx returns nil: SQLite has one writer at a time and no row locks;
// an unordered claim holds its rows by a claim row, written in a transaction
// of its own.
func (Driver) LockingTx() *sql.TxOptions { return nil }

// Quote quotes t with double quotes (the schema is an attached database).
func (Driver) Quote(t ident.Table) string { return t.Quoted() }

// IsTableMissing reports whether err says a table does not exist.
func IsTableMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such table")
}

// PermissionDenied reports whether err says the database is read-only or may
// not be written.
func (Driver) PermissionDenied(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "readonly") || strings.Contains(err.Error(), "not authorized"))
}

// Schemas is not supported: an SQLite tenant is a file.
func (Driver) Schemas(context.Context, store.Execer, string, string) ([]string, error) {
	return nil, fmt.Errorf("schemas: %w", store.ErrNotSupported)
}
