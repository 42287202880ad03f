package testsql

import (
	"strconv"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
)

// Postgres is the SQL the tests need of PostgreSQL.
type Postgres struct{}

var _ SQL = Postgres{}

func (Postgres) Ago(d time.Duration) (string, any) {
	return `now() - CAST(? AS float8) * interval '1 microsecond'`, d.Microseconds()
}

func (Postgres) MicrosUntil(column string) string {
	return `CAST(extract(epoch FROM ` + column + ` - now()) * 1000000 AS bigint)`
}

// SetText casts the text to the outbox's uuid and jsonb columns.
func (Postgres) SetText(column string) string {
	switch column {
	case "id":
		return `id = CAST(? AS uuid)`
	case "payload", "metadata":
		return column + ` = CAST(? AS jsonb)`
	}
	return column + ` = ?`
}

func (Postgres) Refuse(t ident.Table, column, value string) []string {
	return []string{`ALTER TABLE ` + t.Quoted() + ` ADD CONSTRAINT refuse_` + column +
		` CHECK (` + column + ` <> '` + value + `')`}
}

func (Postgres) Column(name string) string { return ident.Name(name).Quoted() }

// Rebind numbers the ? placeholders outside quoted strings and names.
func (Postgres) Rebind(query string) string {
	var (
		b     strings.Builder
		n     int
		quote byte
	)
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func (Postgres) LockWaiters() string {
	return `SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid' AND transactionid = xid(pg_current_xact_id())`
}

func (Postgres) Tables() string {
	return `SELECT relname::text FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p')`
}

// IdleTxTimeout sets idle_in_transaction_session_timeout (the DSN has a
// query already: the schema's search_path).
func (Postgres) IdleTxTimeout(dsn string, d time.Duration) string {
	return dsn + "&idle_in_transaction_session_timeout=" + strconv.FormatInt(d.Milliseconds(), 10)
}

func (Postgres) OneWriter() bool           { return false }
func (Postgres) DeferredConstraints() bool { return true }
func (Postgres) TypedIDs() bool            { return true }
