// Package drivers picks Herald's storage implementation for a *gorm.DB from
// its dialector.
package drivers

import (
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/store"
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
	}
	return nil, fmt.Errorf("%w: %q (Herald supports postgres and sqlite)", ErrUnsupported, name)
}
