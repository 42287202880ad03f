// Package drivers picks Herald's storage implementation for a *gorm.DB from
// its dialector.
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

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/mysql"
	"github.com/heraldgo/herald/internal/store/postgres"
	"github.com/heraldgo/herald/internal/store/sqlite"
)

// ErrUnsupported is returned for a database Herald has no implementation for.
var ErrUnsupported = errors.New("unsupported database")

// Conn is Herald's storage opened for a *gorm.DB: the implementation of its
// database, the pool under the handle, and the table to work on.
type Conn struct {
	Driver store.Driver
	DB     *sql.DB
	Table  ident.Table // zero when opened without a table
}

// Open opens Herald's storage for db and table ("table" or "schema.table";
// empty for none): every public package that takes a *gorm.DB goes through
// it.
func Open(db *gorm.DB, table string) (Conn, error) {
	if db == nil {
		return Conn{}, errors.New("db is required")
	}
	var c Conn
	var err error
	if table != "" {
		if c.Table, err = ident.ParseTable(table); err != nil {
			return Conn{}, err
		}
	}
	if c.Driver, err = For(db); err != nil {
		return Conn{}, err
	}
	if c.DB, err = db.DB(); err != nil {
		return Conn{}, err
	}
	if c.Driver.Name() == "mysql" {
		if err := checkMySQLLoc(db, c.DB); err != nil {
			return Conn{}, err
		}
	}
	return c, nil
}

// ErrMySQLLoc is returned (wrapped) by Open for a MySQL connection whose DSN
// has a loc other than UTC (mysql.ErrLoc).
var ErrMySQLLoc = mysql.ErrLoc

// checkMySQLLoc returns ErrMySQLLoc for a MySQL DSN whose loc is not UTC: the
// loc of gorm.io/driver/mysql's parsed DSN (mysql.CheckLoc), or, for a
// dialector opened on an existing connection (no DSN at hand), what one
// connection of the pool says (mysql.Driver.CheckConn).
func checkMySQLLoc(db *gorm.DB, sqlDB *sql.DB) error {
	if dsn := mysqlDSNConfig(db); dsn.IsValid() {
		if f := dsn.FieldByName("Loc"); f.IsValid() && f.CanInterface() {
			if loc, ok := f.Interface().(*time.Location); ok && loc != nil {
				return mysql.CheckLoc(loc)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return mysql.Driver{}.CheckConn(ctx, sqlDB)
}

// mysqlDSNConfig returns the parsed DSN of db's dialector (gorm.io/driver/mysql's
// Config.DSNConfig, a go-sql-driver *mysql.Config, as a struct value), or the
// zero Value when it has none.
func mysqlDSNConfig(db *gorm.DB) reflect.Value {
	v := reflect.ValueOf(db.Dialector)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	cfg := v.FieldByName("Config")
	if !cfg.IsValid() || cfg.Kind() != reflect.Pointer || cfg.IsNil() {
		return reflect.Value{}
	}
	dsn := cfg.Elem().FieldByName("DSNConfig")
	if !dsn.IsValid() || dsn.Kind() != reflect.Pointer || dsn.IsNil() {
		return reflect.Value{}
	}
	return dsn.Elem()
}

// For returns the implementation for db's dialect ("postgres", ...).
func For(db *gorm.DB) (store.Driver, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: no dialector", ErrUnsupported)
	}
	return ForDialector(db.Dialector)
}

// ForDialector returns the implementation for the dialect of d, a GORM
// dialector, opened or not: what a package that opens its own connections
// (walrelay, from a DSN) or only reads a URL (the herald command) picks its
// driver by.
func ForDialector(d gorm.Dialector) (store.Driver, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: no dialector", ErrUnsupported)
	}
	return ByName(d.Name())
}

// all are the databases Herald supports, one driver each: the one place a
// database is added.
var all = []store.Driver{postgres.Driver{}, sqlite.Driver{}, mysql.Driver{}}

// Names returns the dialect names of the databases Herald supports.
func Names() []string {
	out := make([]string, len(all))
	for i, d := range all {
		out[i] = d.Name()
	}
	return out
}

// ByName returns the implementation for a dialect name.
func ByName(name string) (store.Driver, error) {
	for _, d := range all {
		if d.Name() == name {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: %q (Herald supports %s)", ErrUnsupported, name, strings.Join(Names(), ", "))
}

// ErrClientFoundRows is returned by Check for a MySQL connection opened
// without clientFoundRows=true.
var ErrClientFoundRows = errors.New("MySQL needs clientFoundRows=true in the DSN: without it an UPDATE that changes no column reports 0 rows, " +
	"and the events of a save that changed nothing would never be written")

// CheckConn reports a connection setting no part of Herald can work with,
// by db's dialect: on SQLite, what CheckSQLite reports; nothing elsewhere.
// The relay and the inbox call it; the write path calls Check, which adds
// what only the write path needs.
func CheckConn(db *gorm.DB) error {
	if db.Dialector != nil && db.Dialector.Name() == "sqlite" {
		return CheckSQLite(db)
	}
	return nil
}

// Check reports a connection setting Herald's write path (the outbox hook)
// cannot work with: what CheckConn reports and, on MySQL, a DSN without
// clientFoundRows=true (read from gorm.io/driver/mysql's parsed DSN; a
// dialector that does not expose one is not checked; ErrClientFoundRows says
// why the write path needs it).
func Check(db *gorm.DB) error {
	if err := CheckConn(db); err != nil {
		return err
	}
	if db.Dialector == nil || db.Dialector.Name() != "mysql" {
		return nil
	}
	dsn := mysqlDSNConfig(db)
	if !dsn.IsValid() {
		return nil
	}
	if f := dsn.FieldByName("ClientFoundRows"); f.IsValid() && f.Kind() == reflect.Bool && !f.Bool() {
		return ErrClientFoundRows
	}
	return nil
}
