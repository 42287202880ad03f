package testsql

import (
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store/mysql"
)

// MySQL is the SQL the tests need of MySQL and MariaDB.
type MySQL struct{}

var _ SQL = MySQL{}

func (MySQL) Ago(d time.Duration) (string, any) {
	return mysql.Now + ` - INTERVAL ? MICROSECOND`, d.Microseconds()
}

func (MySQL) MicrosUntil(column string) string {
	return `TIMESTAMPDIFF(MICROSECOND, ` + mysql.Now + `, ` + column + `)`
}

func (MySQL) SetText(column string) string { return column + ` = ?` }

func (MySQL) Refuse(t ident.Table, column, value string) []string {
	return []string{`ALTER TABLE ` + mysql.Quote(t) + ` ADD CONSTRAINT refuse_` + column +
		` CHECK (` + column + ` <> '` + value + `')`}
}

func (MySQL) Column(name string) string { return "`" + name + "`" }

// Rebind leaves the ? placeholders: they are the database's own.
func (MySQL) Rebind(query string) string { return query }

// LockWaiters counts every lock wait in the test's database: MySQL cannot
// tell for whom.
func (MySQL) LockWaiters() string {
	return `SELECT COUNT(*) FROM information_schema.innodb_trx t JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()`
}

func (MySQL) Tables() string {
	return `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()`
}

// IdleTxTimeout leaves dsn alone: the server's wait_timeout is not for
// transactions alone.
func (MySQL) IdleTxTimeout(dsn string, _ time.Duration) string { return dsn }

func (MySQL) OneWriter() bool { return false }

// DeferredConstraints is false: MySQL checks every constraint at once.
func (MySQL) DeferredConstraints() bool { return false }
func (MySQL) TypedIDs() bool            { return false }
