package outboxhook

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/store"
)

// ErrSchemaOutdated is returned (wrapped) by db.Use when the outbox table
// exists but lacks a column, table or row that a migration makes (a table
// made by an earlier release); the message names the migration to run
// (migrations.Migrate applies it). It is the same error as
// relay.ErrSchemaOutdated and inbox.ErrSchemaOutdated.
var ErrSchemaOutdated = store.ErrSchemaOutdated

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

// checkTable fails with ErrSchemaOutdated when the outbox lacks what a
// migration makes. It reads the catalog once, at db.Use, and needs no DDL
// rights.
func (p *Plugin) checkTable(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("outboxhook: %w", err)
	}
	if err := p.out.Check(ctx, sqlDB); err != nil {
		return fmt.Errorf("outboxhook: table %s: %w", p.table, err)
	}
	return nil
}
