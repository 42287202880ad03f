// Package drivers picks Herald's storage implementation for a *gorm.DB from
// its dialector.
package drivers

import (
	"errors"
	"fmt"
	"reflect"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/mysql"
	"github.com/heraldgo/herald/internal/store/postgres"
	"github.com/heraldgo/herald/internal/store/sqlite"
)

// ErrUnsupported is returned for a database Herald has no implementation for.
var ErrUnsupported = errors.New("unsupported database")

// For returns the implementation for db's dialect ("postgres", ...).
func For(db *gorm.DB) (store.Driver, error) {
	if db == nil || db.Dialector == nil {
		return nil, fmt.Errorf("%w: no dialector", ErrUnsupported)
	}
	return ByName(db.Dialector.Name())
}

// ByName returns the implementation for a dialect name.
func ByName(name string) (store.Driver, error) {
	switch name {
	case "postgres":
		return postgres.Driver{}, nil
	case "sqlite":
		return sqlite.Driver{}, nil
	case "mysql":
		return mysql.Driver{}, nil
	}
	return nil, fmt.Errorf("%w: %q (Herald supports postgres, sqlite and mysql)", ErrUnsupported, name)
}

// ErrClientFoundRows is returned by Check for a MySQL connection opened
// without clientFoundRows=true.
var ErrClientFoundRows = errors.New("MySQL needs clientFoundRows=true in the DSN: without it an UPDATE that changes no column reports 0 rows, " +
	"and the events of a save that changed nothing would never be written")

// Check reports a connection setting Herald cannot work with: on MySQL, a
// DSN without clientFoundRows=true (read from gorm.io/driver/mysql's parsed
// DSN; a dialector that does not expose one is not checked).
func Check(db *gorm.DB) error {
	if db.Dialector.Name() != "mysql" {
		return nil
	}
	v := reflect.ValueOf(db.Dialector)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	cfg := v.FieldByName("Config")
	if !cfg.IsValid() || cfg.Kind() != reflect.Pointer || cfg.IsNil() {
		return nil
	}
	dsn := cfg.Elem().FieldByName("DSNConfig")
	if !dsn.IsValid() || dsn.Kind() != reflect.Pointer || dsn.IsNil() {
		return nil
	}
	if f := dsn.Elem().FieldByName("ClientFoundRows"); f.IsValid() && f.Kind() == reflect.Bool && !f.Bool() {
		return ErrClientFoundRows
	}
	return nil
}
