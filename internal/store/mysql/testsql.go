package mysql

import (
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// TestSQL returns the SQL the tests need of MySQL and MariaDB (store.TestSQL).
func (Driver) TestSQL() store.TestSQL { return testSQL{} }

type testSQL struct{}

func (testSQL) Ago(d time.Duration) (string, any) {
	return Now + ` - INTERVAL ? MICROSECOND`, d.Microseconds()
}

func (testSQL) MicrosUntil(column string) string {
	return `TIMESTAMPDIFF(MICROSECOND, ` + Now + `, ` + column + `)`
}

func (testSQL) SetText(column string) string { return column + ` = ?` }

func (testSQL) Refuse(t ident.Table, column, value string) []string {
	return []string{`ALTER TABLE ` + Quote(t) + ` ADD CONSTRAINT refuse_` + column +
		` CHECK (` + column + ` <> '` + value + `')`}
}

func (testSQL) Column(name string) string { return "`" + name + "`" }

// Rebind leaves the ? placeholders: they are the database's own.
func (testSQL) Rebind(query string) string { return query }

// LockWaiters counts every lock wait in the test's database: MySQL cannot
// tell for whom.
func (testSQL) LockWaiters() string {
	return `SELECT COUNT(*) FROM information_schema.innodb_trx t JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()`
}

func (testSQL) Tables() string {
	return `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()`
}

// IdleTxTimeout leaves dsn alone: the server's wait_timeout is not for
// transactions alone.
func (testSQL) IdleTxTimeout(dsn string, _ time.Duration) string { return dsn }

func (testSQL) OneWriter() bool { return false }

// DeferredConstraints is false: MySQL checks every constraint at once.
func (testSQL) DeferredConstraints() bool { return false }
func (testSQL) TypedIDs() bool            { return false }
