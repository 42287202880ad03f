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

// ensureTable creates the outbox table and its index when the table is
// missing (the statements of the database's first migration, for the
// configured name). It checks first, so a role without DDL rights works
// against a table created beforehand.
func (p *Plugin) ensureTable(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("outboxhook: %w", err)
	}
	ok, err := p.out.Exists(ctx, sqlDB)
	if err != nil {
		return fmt.Errorf("outboxhook: look up table %s: %w", p.table, err)
	}
	if ok {
		return nil
	}
	if err := p.out.Create(ctx, sqlDB); err != nil {
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
