package sqlite

import (
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// TestSQL returns the SQL the tests need of SQLite (store.TestSQL).
func (Driver) TestSQL() store.TestSQL { return testSQL{} }

type testSQL struct{}

// Ago: SQLite's timestamps are integer microseconds since the epoch (Now).
func (testSQL) Ago(d time.Duration) (string, any) { return Now + ` - ?`, d.Microseconds() }

func (testSQL) MicrosUntil(column string) string { return column + ` - ` + Now }

func (testSQL) SetText(column string) string { return column + ` = ?` }

// Refuse uses triggers: SQLite adds no constraint to an existing table.
func (testSQL) Refuse(t ident.Table, column, value string) []string {
	var out []string
	for _, on := range []string{"INSERT", "UPDATE OF " + column} {
		out = append(out, `CREATE TRIGGER refuse_`+column+`_`+strings.Fields(on)[0]+` BEFORE `+on+` ON `+t.Quoted()+
			` WHEN NEW.`+column+` = '`+value+`' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
	}
	return out
}

func (testSQL) Column(name string) string { return ident.Name(name).Quoted() }

// Rebind leaves the ? placeholders: they are the database's own.
func (testSQL) Rebind(query string) string { return query }

// LockWaiters is "": a connection waiting for the write lock waits in the
// driver's busy handler, where nothing shows it.
func (testSQL) LockWaiters() string { return "" }

func (testSQL) Tables() string { return `SELECT name FROM sqlite_master WHERE type = 'table'` }

// IdleTxTimeout leaves dsn alone: there is no server.
func (testSQL) IdleTxTimeout(dsn string, _ time.Duration) string { return dsn }

// OneWriter is true: SQLite has one write lock.
func (testSQL) OneWriter() bool           { return true }
func (testSQL) DeferredConstraints() bool { return true }
func (testSQL) TypedIDs() bool            { return false }
