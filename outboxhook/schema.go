package outboxhook

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// ensureTable creates what the write path needs when it is missing: the
// outbox table and its index, and the tables the database's writers lock
// (the statements of the database's migrations, for the configured name).
// Each object is looked up first, so a role without DDL rights works against
// objects created beforehand; an object added by a later migration (an
// outbox created before it) is created then too.
func (p *Plugin) ensureTable(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("outboxhook: %w", err)
	}
	if err := p.out.Create(ctx, sqlDB); err != nil {
		return fmt.Errorf("outboxhook: create table %s: %w", p.table, err)
	}
	return nil
}
