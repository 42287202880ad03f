package testkit

import (
	"context"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

// TableExists reports whether the outbox-shaped or inbox-shaped table named
// name exists in db, asked the way Herald asks (its store's Exists).
func TableExists(t tb.TB, db *gorm.DB, name string) bool {
	t.Helper()
	d, err := drivers.For(db)
	Must(t, err)
	sqlDB, err := db.DB()
	Must(t, err)
	var s interface {
		Exists(context.Context, store.Execer) (bool, error)
	} = d.Outbox(ident.MustTable(name))
	ok, err := s.Exists(context.Background(), sqlDB)
	Must(t, err)
	return ok
}
