package inbox

import (
	"context"
	"fmt"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/store"
)

// ErrSchemaOutdated is returned (wrapped) by New when the inbox table exists
// but lacks what a migration makes; the message names the migration to run.
// It is the same error as outboxhook.ErrSchemaOutdated.
var ErrSchemaOutdated = store.ErrSchemaOutdated

// ErrSQLiteSettings is returned (wrapped) by New for an SQLite connection
// without a busy timeout, immediate transactions (_txlock=immediate) or WAL;
// the message names the DSN to open the file with. It is the same error as
// outboxhook.ErrSQLiteSettings, whose documentation says why each is needed.
var ErrSQLiteSettings = drivers.ErrSQLiteSettings

// ErrMySQLLoc is returned (wrapped) by New for a MySQL connection whose DSN
// has a loc other than UTC; the same error as outboxhook.ErrMySQLLoc.
var ErrMySQLLoc = drivers.ErrMySQLLoc

// ensureTable creates the inbox table and its index when the table is missing
// (the statements of the database's inbox migration, for the configured name).
// It checks first, so a role without DDL rights works once the table exists.
func (in *Inbox) ensureTable(ctx context.Context) error {
	ok, err := in.store.Exists(ctx, in.sqlDB)
	if err != nil {
		return fmt.Errorf("inbox: look up table %s: %w", in.cfg.Table, err)
	}
	if ok {
		return nil
	}
	if err := in.store.Create(ctx, in.sqlDB); err != nil {
		return fmt.Errorf("inbox: create table %s: %w", in.cfg.Table, err)
	}
	return nil
}

// checkTable fails with ErrSchemaOutdated when the inbox lacks what a
// migration makes (a catalog read, no DDL).
func (in *Inbox) checkTable(ctx context.Context) error {
	if err := in.store.Check(ctx, in.sqlDB); err != nil {
		return fmt.Errorf("inbox: table %s: %w", in.cfg.Table, err)
	}
	return nil
}
