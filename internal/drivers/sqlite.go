package drivers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/store/sqlite"
)

// ErrSQLiteSettings is returned (wrapped) by Check and CheckSQLite for an
// SQLite connection without a busy timeout, immediate transactions or WAL, or
// an in-memory database on a pool of several connections. The public packages
// export it as outboxhook.ErrSQLiteSettings (relay's and inbox's are the same
// error), whose documentation says why Herald needs each setting.
var ErrSQLiteSettings = errors.New("SQLite needs a busy timeout, immediate transactions and WAL")

// dialectorDSN returns the DSN field of db's dialector (gorm.io/driver/sqlite's
// and github.com/glebarez/sqlite's Dialector have one), or "" when it has
// none or is empty (a dialector opened on an existing connection).
func dialectorDSN(db *gorm.DB) string {
	v := reflect.ValueOf(db.Dialector)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return ""
	}
	if f := v.FieldByName("DSN"); f.IsValid() && f.Kind() == reflect.String {
		return f.String()
	}
	return ""
}

// isMattn reports whether the pool's database/sql driver is
// github.com/mattn/go-sqlite3.
func isMattn(sqlDB *sql.DB) bool {
	t := reflect.TypeOf(sqlDB.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && strings.HasPrefix(t.PkgPath(), "github.com/mattn/go-sqlite3")
}

// CheckSQLite reports, on SQLite, a connection without the settings Herald
// needs (ErrSQLiteSettings): it asks one connection of the pool for its busy
// timeout and journal mode, and reads _txlock from the dialector's DSN. A
// dialector opened on an existing connection shows no DSN, and its
// transaction lock is not checked; a connection that cannot be asked (the
// query fails) is not checked at all: what Herald does next with it fails
// on its own. Other databases pass.
func CheckSQLite(db *gorm.DB) error {
	if db.Dialector == nil || db.Dialector.Name() != "sqlite" {
		return nil
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := askSQLite(ctx, sqlDB)
	if err != nil {
		return nil
	}
	dsn := dialectorDSN(db)
	mattn := isMattn(sqlDB)
	if s.memory {
		if sqlDB.Stats().MaxOpenConnections == 1 {
			return nil
		}
		return fmt.Errorf("%w: an in-memory database cannot be in WAL mode, and on a pool of more than one connection is one database per connection "+
			"(or, with a shared cache, locks table by table, outside the busy timeout): open a file, e.g. %s, "+
			"or give the pool one connection (sqlDB.SetMaxOpenConns(1)) before db.Use, relay.New and inbox.New", ErrSQLiteSettings, recommendedDSN("", mattn))
	}
	var missing []string
	if s.busyTimeout <= 0 {
		missing = append(missing, "no busy timeout (PRAGMA busy_timeout = 0)")
	}
	if dsn != "" {
		if lock := sqlite.TxLock(dsn); lock != "immediate" && lock != "exclusive" {
			if lock == "" {
				lock = "deferred, the default"
			}
			missing = append(missing, "deferred transactions (_txlock: "+lock+")")
		}
	}
	if s.journalMode != "wal" {
		missing = append(missing, "journal_mode "+s.journalMode+", not WAL")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: this connection has %s; open it with the DSN %s", ErrSQLiteSettings, strings.Join(missing, ", "), recommendedDSN(dsn, mattn))
}

// recommendedDSN is dsn with Herald's settings in the syntax of the driver in
// use (the DSN for an example file when dsn is "" or in-memory), quoted, and
// the driver.
func recommendedDSN(dsn string, mattn bool) string {
	if dsn == "" || sqlite.MemoryDSN(dsn) {
		dsn = "file:app.db"
	}
	if mattn {
		return fmt.Sprintf("%q (github.com/mattn/go-sqlite3's syntax)", sqlite.WithSettings(dsn, true))
	}
	return fmt.Sprintf("%q (modernc.org/sqlite's syntax)", sqlite.WithSettings(dsn, false))
}

// sqliteSettings are what a connection says of itself.
type sqliteSettings struct {
	busyTimeout int
	journalMode string // lower-cased
	memory      bool   // the main database has no file
}

// askSQLite reads the settings of one connection of sqlDB.
func askSQLite(ctx context.Context, sqlDB *sql.DB) (sqliteSettings, error) {
	var s sqliteSettings
	c, err := sqlDB.Conn(ctx)
	if err != nil {
		return s, err
	}
	defer func() { _ = c.Close() }()
	if err := c.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&s.busyTimeout); err != nil {
		return s, err
	}
	if err := c.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&s.journalMode); err != nil {
		return s, err
	}
	s.journalMode = strings.ToLower(s.journalMode)
	var file string
	if err := c.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file); err != nil {
		return s, err
	}
	s.memory = file == ""
	return s, nil
}
