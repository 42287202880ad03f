package outboxhook

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

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
