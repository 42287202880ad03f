package testsql

import (
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store/sqlite"
)

// SQLite is the SQL the tests need of SQLite.
type SQLite struct{}

var _ SQL = SQLite{}

// Ago: SQLite's timestamps are integer microseconds since the epoch (sqlite.Now).
func (SQLite) Ago(d time.Duration) (string, any) { return sqlite.Now + ` - ?`, d.Microseconds() }

func (SQLite) MicrosUntil(column string) string { return column + ` - ` + sqlite.Now }

func (SQLite) SetText(column string) string { return column + ` = ?` }

// Refuse uses triggers: SQLite adds no constraint to an existing table.
func (SQLite) Refuse(t ident.Table, column, value string) []string {
	var out []string
	for _, on := range []string{"INSERT", "UPDATE OF " + column} {
		out = append(out, `CREATE TRIGGER refuse_`+column+`_`+strings.Fields(on)[0]+` BEFORE `+on+` ON `+t.Quoted()+
			` WHEN NEW.`+column+` = '`+value+`' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
	}
	return out
}

func (SQLite) Column(name string) string { return ident.Name(name).Quoted() }

// Rebind leaves the ? placeholders: they are the database's own.
func (SQLite) Rebind(query string) string { return query }

// LockWaiters is "": a connection waiting for the write lock waits in the
// driver's busy handler, where nothing shows it.
func (SQLite) LockWaiters() string { return "" }

func (SQLite) Tables() string { return `SELECT name FROM sqlite_master WHERE type = 'table'` }

// IdleTxTimeout leaves dsn alone: there is no server.
func (SQLite) IdleTxTimeout(dsn string, _ time.Duration) string { return dsn }

// OneWriter is true: SQLite has one write lock.
func (SQLite) OneWriter() bool           { return true }
func (SQLite) DeferredConstraints() bool { return true }
func (SQLite) TypedIDs() bool            { return false }
