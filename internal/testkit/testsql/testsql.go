// Package testsql is the SQL Herald's tests need of each database beyond what
// Herald itself sends (SQL), one implementation per database: Postgres,
// SQLite, MySQL. It is test support, outside the drivers' packages, so that
// none of it reaches a production build; whoever opens a test's database
// (testkit's Dialect, a driver's harness of the driver-level suite) hands the
// tests the one of that database.
package testsql

import (
	"time"

	"github.com/heraldgo/herald/internal/ident"
)

// SQL is the SQL Herald's tests need of one database beyond what Herald
// itself sends: reading a row's clock columns, moving them, storing values
// Herald would never write, making a table refuse a value. Each database has
// its own (Postgres, SQLite, MySQL), handed to the tests by whoever opened the
// database, so that the tests' helpers (internal/testkit), the driver-level
// suite (package drivertest) and the conformance suite hold no SQL of any one
// database and ask no driver its name. Herald itself never calls it.
type SQL interface {
	// Ago returns an expression of the database's time d before its now, in
	// the type of the outbox's timestamp columns, and its one argument.
	Ago(d time.Duration) (expr string, arg any)
	// MicrosUntil returns an integer expression of the microseconds from the
	// database's now until the timestamp column (negative once past).
	MicrosUntil(column string) string
	// SetText returns the assignment (column = ...) that stores its one text
	// argument in the outbox column as it is, past every check of Herald's,
	// cast to the column's type where the database needs it (which may refuse
	// the text).
	SetText(column string) string
	// Refuse returns the statements that make every INSERT into t of a row
	// whose column is value, and every UPDATE that sets it, fail (a CHECK
	// constraint, or triggers where an existing table takes no constraint).
	Refuse(t ident.Table, column, value string) []string
	// Column quotes a column name ("partition" is a keyword everywhere).
	Column(name string) string
	// Rebind rewrites the ? placeholders of query into the database's own
	// ($1, $2, ... on PostgreSQL), for tests that send SQL on a *sql.DB
	// rather than through GORM (which rewrites them itself).
	Rebind(query string) string
	// LockWaiters returns a query, run in a transaction, counting the
	// transactions of the test's database that wait for a lock it holds (or
	// for any lock, where the database cannot tell whose); "" where a
	// waiting connection cannot be seen (SQLite's writers wait in the
	// driver's busy handler).
	LockWaiters() string
	// Tables returns a query listing the names of the test's tables (those
	// of its schema or database).
	Tables() string
	// IdleTxTimeout returns dsn with the server ending a session left idle
	// in a transaction for d, or dsn itself where the server cannot.
	IdleTxTimeout(dsn string, d time.Duration) string

	// OneWriter reports whether the database runs one write transaction at
	// a time (SQLite): a write through another connection waits for the
	// one in progress.
	OneWriter() bool
	// DeferredConstraints reports whether a constraint can be checked at
	// COMMIT (DEFERRABLE INITIALLY DEFERRED), so that a COMMIT can fail on
	// it (not MySQL).
	DeferredConstraints() bool
	// TypedIDs reports whether the outbox's id column refuses text that is
	// not a UUID (PostgreSQL's uuid type).
	TypedIDs() bool
}
