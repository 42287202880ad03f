// Package postgres is Herald's storage for PostgreSQL 13 and newer: all of its
// SQL, and its migrations. It works through database/sql on the pgx driver
// (gorm.io/driver/postgres).
package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Driver is the PostgreSQL implementation of store.Driver.
type Driver struct{}

var _ store.Driver = Driver{}

// Name returns "postgres".
func (Driver) Name() string { return "postgres" }

// LockingTx returns nil: PostgreSQL's default, READ COMMITTED, takes no
// range locks.
func (Driver) LockingTx() *sql.TxOptions { return nil }

// Caps: LISTEN/NOTIFY, row locks (FOR UPDATE SKIP LOCKED), a claim position,
// partitions, aborting a transaction, an outbox in the WAL.
func (Driver) Caps() store.Caps {
	return store.Caps(store.Listen | store.RowLocks | store.Position | store.Partitions | store.AbortTx | store.Messages)
}

// Quote quotes t with double quotes.
func (Driver) Quote(t ident.Table) string { return t.Quoted() }

// IsTableMissing reports whether err is PostgreSQL's undefined_table.
func IsTableMissing(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// IsPermissionDenied reports whether err is PostgreSQL's insufficient_privilege.
func IsPermissionDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// lockContended reports whether err is a lock wait given up
// (lock_not_available, after lock_timeout) or a statement ended by
// statement_timeout (query_canceled): partition maintenance ends its round
// there rather than queue the saves behind one more wait.
func lockContended(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "57014")
}

// PermissionDenied reports whether err is insufficient_privilege.
func (Driver) PermissionDenied(err error) bool { return IsPermissionDenied(err) }

// Schemas returns the schemas matching like that hold table.
func (Driver) Schemas(ctx context.Context, x store.Execer, like, table string) ([]string, error) {
	return sqlkit.Column[string](ctx, x, `SELECT table_schema FROM information_schema.tables
WHERE table_name = $1 AND table_schema LIKE $2 ORDER BY table_schema`, table, like)
}
