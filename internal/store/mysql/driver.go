// Package mysql is Herald's storage for MySQL 8.0.16+ and MariaDB 10.6+
// (InnoDB): all of its SQL, and its migrations. It works through database/sql
// on go-sql-driver/mysql (gorm.io/driver/mysql). Herald is tested on MariaDB
// 10.11; it uses only SQL that MySQL 8 accepts too: FOR UPDATE SKIP LOCKED, no
// RETURNING (MySQL has none), no partial indexes, no transactional DDL. The
// one exception is the shared locking read that skips locked rows, which the
// two spell differently (the ordered claim's confirmation of scheduled
// events): the relay asks the server which it is.
//
// Times are UTC: Herald writes UTC_TIMESTAMP(6) and compares with it, whatever
// the session's time zone, and the times it passes as arguments (occurred_at,
// due times) are UTC; go-sql-driver writes and reads DATETIME values as wall
// times of the DSN's loc, which must therefore be UTC, its default (CheckConn
// refuses another: ErrLoc). Inserts are plain INSERTs: neither INSERT IGNORE
// (which would also swallow a CHECK constraint's or a truncation's error and
// drop the row) nor ON DUPLICATE KEY UPDATE (whose count cannot tell a
// duplicate from a new row under clientFoundRows, which GORM's Save needs). A
// duplicate key fails only its statement in MySQL, so an insert that meets one
// is retried row by row, skipping the rows that exist.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Now is the database's current UTC time, to the microsecond.
const Now = `UTC_TIMESTAMP(6)`

// Driver is the MySQL/MariaDB implementation of store.Driver.
type Driver struct{}

var _ store.Driver = Driver{}

// Name returns "mysql".
func (Driver) Name() string { return "mysql" }

// Caps: row locks (FOR UPDATE SKIP LOCKED); found rows counted as affected
// (clientFoundRows). No LISTEN/NOTIFY, no claim position, no partitions.
func (Driver) Caps() store.Caps { return store.Caps(store.RowLocks | store.FoundRows) }

// readCommitted is the isolation of every transaction Herald begins on MySQL
// that locks rows (the relay's claims and marks, lease acquisition, cleanup,
// the admin's writes), whatever the session's default: in READ COMMITTED
// InnoDB takes no gap locks, so an application's INSERT of new events never
// waits for a claim held across a publish, a cleanup or a requeue; and an
// UPDATE passes over rows other transactions locked that it does not change
// (the rows relays claimed) instead of waiting for them. go-sql-driver runs
// SET TRANSACTION ISOLATION LEVEL before the transaction's BEGIN: it holds
// for that transaction alone.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// LockingTx returns READ COMMITTED (see readCommitted).
func (Driver) LockingTx() *sql.TxOptions { return &sql.TxOptions{Isolation: readCommitted.Isolation} }

// Quote quotes t with backticks.
func (Driver) Quote(t ident.Table) string { return Quote(t) }

// Quote quotes t with backticks: `schema`.`table`.
func Quote(t ident.Table) string {
	if t.Schema == "" {
		return "`" + string(t.Name) + "`"
	}
	return "`" + string(t.Schema) + "`.`" + string(t.Name) + "`"
}

// IsTableMissing reports whether err is MySQL's "table doesn't exist" (1146).
func IsTableMissing(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "Error 1146") || strings.Contains(err.Error(), "doesn't exist"))
}

// PermissionDenied reports whether err is MySQL's "command denied" (1142) or
// "access denied" (1044).
func (Driver) PermissionDenied(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "Error 1142") || strings.Contains(err.Error(), "Error 1044"))
}

// parseTime reads a DATETIME(6) whether the DSN has parseTime or not.
func parseTime(v any) (time.Time, error) {
	switch t := v.(type) {
	case time.Time:
		return t.UTC(), nil
	case []byte:
		return time.ParseInLocation("2006-01-02 15:04:05.999999", string(t), time.UTC)
	case string:
		return time.ParseInLocation("2006-01-02 15:04:05.999999", t, time.UTC)
	case nil:
		return time.Time{}, nil
	}
	return time.Time{}, fmt.Errorf("mysql: time of type %T", v)
}

// ErrLoc is returned (wrapped) by CheckConn for a connection whose DSN has a
// loc other than UTC (loc=Local on a host whose zone is not UTC, or a named
// zone with an offset).
var ErrLoc = errors.New("MySQL needs loc=UTC in the DSN (go-sql-driver's default): Herald's time columns hold UTC, " +
	"and with another loc the driver writes and reads them as that zone's wall times, shifted by its offset")

// CheckLoc returns ErrLoc (wrapped) when loc, a DSN's loc (go-sql-driver's
// Config.Loc), is not UTC all year: a zone whose offset is zero on the first
// of every month of this year (UTC, GMT, or Local on a host in UTC) passes.
func CheckLoc(loc *time.Location) error {
	if loc == nil {
		return nil
	}
	for _, p := range locProbes() {
		if _, off := p.In(loc).Zone(); off != 0 {
			return fmt.Errorf("%w; the DSN has loc=%s (%s UTC is %s there)", ErrLoc, loc, p.Format(time.DateTime), p.In(loc).Format(time.DateTime))
		}
	}
	return nil
}

// locProbes are the instants CheckLoc and CheckConn look at: noon UTC on the
// first of each month of this year.
func locProbes() []time.Time {
	year := time.Now().UTC().Year()
	out := make([]time.Time, 0, 12)
	for m := time.January; m <= time.December; m++ {
		out = append(out, time.Date(year, m, 1, 12, 0, 0, 0, time.UTC))
	}
	return out
}

// CheckConn reports a setting of db's connections Herald cannot work with: a
// DSN whose loc is not UTC all year (ErrLoc), for a pool whose DSN is not at
// hand (CheckLoc checks a parsed one): it asks one connection of the pool,
// passing the instants CheckLoc looks at as arguments (the driver writes them
// as wall times of its loc) and reading them back. A connection that cannot
// be asked (the query fails) is not checked: what Herald does next with it
// fails on its own.
func (Driver) CheckConn(ctx context.Context, db *sql.DB) error {
	return checkConnLoc(ctx, db)
}

func checkConnLoc(ctx context.Context, db store.Execer) error {
	probes := locProbes()
	cols := make([]string, len(probes))
	for i := range cols {
		cols[i] = "CAST(? AS CHAR)"
	}
	rows, err := db.QueryContext(ctx, `SELECT `+strings.Join(cols, ", ")+`, CAST('2000-01-01 00:00:00' AS DATETIME)`, sqlkit.Anys(probes)...)
	if err != nil {
		return nil
	}
	defer func() { _ = rows.Close() }()
	if !rows.Next() {
		return nil
	}
	got := make([]string, len(probes))
	dest := make([]any, 0, len(probes)+1)
	for i := range got {
		dest = append(dest, &got[i])
	}
	var read any // a time.Time in the driver's loc with parseTime
	if err := rows.Scan(append(dest, &read)...); err != nil {
		return nil
	}
	loc := "a zone other than UTC"
	if t, ok := read.(time.Time); ok {
		loc = "loc=" + t.Location().String()
	}
	for i, p := range probes {
		if g, err := time.ParseInLocation("2006-01-02 15:04:05.999999", got[i], time.UTC); err == nil && !g.Equal(p) {
			return fmt.Errorf("%w; this connection has %s (it writes %s UTC as %s)", ErrLoc, loc, p.Format(time.DateTime), got[i])
		}
	}
	return nil
}

// Schemas returns the schemas matching like that hold table.
func (Driver) Schemas(ctx context.Context, x store.Execer, like, table string) ([]string, error) {
	return sqlkit.Column[string](ctx, x, `SELECT table_schema FROM information_schema.tables
WHERE table_name = ? AND table_schema LIKE ? ORDER BY table_schema`, table, like)
}
