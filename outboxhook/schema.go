package outboxhook

import (
	"context"
	"fmt"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/store"
)

// ErrSchemaOutdated is returned (wrapped) by db.Use when the outbox table
// exists but lacks a column, table or row that a migration makes (a table
// made by an earlier release); the message names the migration to run
// (migrations.Migrate applies it). It is the same error as
// relay.ErrSchemaOutdated and inbox.ErrSchemaOutdated.
var ErrSchemaOutdated = store.ErrSchemaOutdated

// ErrSQLiteSettings is returned (wrapped) by db.Use, relay.New and inbox.New
// for an SQLite connection without the settings Herald needs; the message says
// which are missing and names the DSN to open the file with, in the syntax of
// the driver in use (modernc.org/sqlite:
// file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate;
// mattn/go-sqlite3: file:app.db?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate).
// Without them concurrent writers fail with "database is locked":
//
//   - a busy timeout (PRAGMA busy_timeout > 0): SQLite has one write lock, and
//     a writer that finds it taken waits up to the timeout instead of failing
//     at once;
//   - immediate transactions (_txlock=immediate, read from the DSN): a write
//     transaction takes the write lock at BEGIN and queues for it there; a
//     deferred one that read first cannot take it once another transaction
//     committed meanwhile, and fails whatever the timeout;
//   - WAL (PRAGMA journal_mode = wal): readers, the relay's polls among them,
//     neither block the writer nor wait for it.
//
// The busy timeout and the journal mode are asked of a connection; the
// transaction lock is read from the DSN of gorm.io/driver/sqlite's (or
// glebarez/sqlite's) dialector, and is not checked for a dialector opened on
// an existing connection (sqlite.Config{Conn: ...}). An in-memory database
// (":memory:", mode=memory) cannot be in WAL mode and, on a pool of several
// connections, is one database per connection (or, with a shared cache,
// locks table by table, outside the busy timeout: mattn/go-sqlite3's writers
// fail with "database table is locked"): it passes only on a pool of one
// connection (sqlDB.SetMaxOpenConns(1), before db.Use), on which Herald's
// writers and relay take turns.
var ErrSQLiteSettings = drivers.ErrSQLiteSettings

// ErrMySQLLoc is returned (wrapped) by db.Use, relay.New, inbox.New and
// admin.New for a MySQL connection whose DSN has a loc other than UTC
// (go-sql-driver's default): Herald's time columns hold UTC, and the driver
// writes and reads DATETIME values as wall times of loc, so times would be
// off by the zone's offset. loc=Local is refused on a host whose zone is not
// UTC all year. The message names the setting.
var ErrMySQLLoc = drivers.ErrMySQLLoc

// ensureTable creates what the write path needs when it is missing: the
// outbox table and its index, and the tables the database's writers lock
// (the statements of the database's migrations, for the configured name).
// Each object is looked up first, so a role without DDL rights works against
// objects created beforehand. An object added by a later migration to an
// outbox made before it (PostgreSQL's aggregate locks table, migration 0006)
// is created too; when the role may not, the outbox's writes that need it
// fail naming it, and the others work.
func (p *Plugin) ensureTable(ctx context.Context, conn drivers.Conn) error {
	ok, err := p.out.Exists(ctx, conn.DB)
	if err != nil {
		return fmt.Errorf("outboxhook: look up table %s: %w", p.table, err)
	}
	if err := p.out.Create(ctx, conn.DB); err != nil {
		if ok && conn.Driver.PermissionDenied(err) {
			return nil
		}
		return fmt.Errorf("outboxhook: create table %s: %w", p.table, err)
	}
	return nil
}

// checkTable fails with ErrSchemaOutdated when the outbox lacks what a
// migration makes. It reads the catalog once, at db.Use, and needs no DDL
// rights.
func (p *Plugin) checkTable(ctx context.Context, conn drivers.Conn) error {
	if err := p.out.Check(ctx, conn.DB); err != nil {
		return fmt.Errorf("outboxhook: table %s: %w", p.table, err)
	}
	return nil
}
