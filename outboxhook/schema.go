package outboxhook

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/store"
)

// ensureTable creates what the write path needs when it is missing: the
// outbox table and its index, and the tables the database's writers lock
// (the statements of the database's migrations, for the configured name).
// Each object is looked up first, so a role without DDL rights works against
// objects created beforehand. An object added by a later migration to an
// outbox made before it (PostgreSQL's aggregate locks table, migration 0006)
// is created too; when the role may not, the outbox's writes that need it
// fail naming it, and the others work.
func (p *Plugin) ensureTable(ctx context.Context, db *gorm.DB, drv store.Driver) error {
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("outboxhook: %w", err)
	}
	ok, err := p.out.Exists(ctx, sqlDB)
	if err != nil {
		return fmt.Errorf("outboxhook: look up table %s: %w", p.table, err)
	}
	if err := p.out.Create(ctx, sqlDB); err != nil {
		if ok && drv.PermissionDenied(err) {
			return nil
		}
		return fmt.Errorf("outboxhook: create table %s: %w", p.table, err)
	}
	return nil
}
