// Package migrations holds Herald's database schema as numbered migrations,
// one set per database, and applies them.
//
// Each set is an fs.FS of NNNN_name.up.sql / NNNN_name.down.sql pairs in one
// number sequence across the outbox, the relay's additions and the inbox, for
// the default table names (outbox_messages, inbox_messages). golang-migrate runs
// them as they are (source iofs); goose runs them through [Goose], which joins
// each pair into one annotated file. [Migrate] applies them itself and records
// each version in herald_schema_migrations, so that a later release can change
// the schema. [List] lists a set's migrations (version, name, files),
// [ForDatabase] picks a database's set by name, and [Status] tells which of a
// database's migrations are applied.
//
// Herald also creates its tables when they are missing (and leaves them alone
// when present), so migrations are for deployments where the application's
// roles may not create tables, or that manage schema with a tool. Released
// migrations are never edited: a change is a new migration, which Migrate and
// Herald's own creation both read. At start the outbox hook, the relay and the
// inbox check that an existing table has what every migration makes, and fail
// with ErrSchemaOutdated naming the migration to run.
//
// Writing a migration (the next number, in every database's set): one object
// a statement, named as the default tables are and quoted, names of other
// objects derived from them (outbox_messages_*): CREATE TABLE, CREATE INDEX,
// ALTER TABLE ... ADD COLUMN (one column). Herald looks each up before it
// makes it, so each is safe over tables that have it. A statement that follows
// one of these (seed rows, a backfill) runs only when that one was made; a
// data step on rows already there stands first, after a line
// "-- herald:check <query>" whose query returns a row when the step's rows are
// there (Migrate then skips it, and the start-up check requires it). Lines
// starting "-- herald: " are statements only Herald runs (the tools read them
// as comments), for what plain SQL cannot make conditional on a database.
// Herald's own creation makes the new tables and indexes, and the new columns
// of the tables it makes in the same call; it never alters a table that was
// there before: the start-up check then names the migration.
package migrations

import (
	"context"
	"fmt"
	"io/fs"
	"slices"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/memfs"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
)

// ErrSchemaOutdated is returned (wrapped) at start by the outbox hook, the
// relay and the inbox for a table that lacks what a migration makes; the
// message names the migration. It is outboxhook.ErrSchemaOutdated,
// relay.ErrSchemaOutdated and inbox.ErrSchemaOutdated.
var ErrSchemaOutdated = store.ErrSchemaOutdated

// Postgres returns the PostgreSQL migrations.
func Postgres() fs.FS { return of("postgres") }

// PostgresPartitioned returns the PostgreSQL migrations with the outbox
// partitioned by occurred_at (its 0001 replaced, the rest the same): the schema
// for retention by partition drop (relay.Config.DropPartitions).
func PostgresPartitioned() fs.FS { return drivers.PartitionedMigrations() }

// SQLite returns the SQLite migrations.
func SQLite() fs.FS { return of("sqlite") }

// MySQL returns the MySQL/MariaDB migrations.
func MySQL() fs.FS { return of("mysql") }

// of returns the migrations of a database Herald supports, by its driver's
// name.
func of(name string) fs.FS {
	d, err := drivers.ByName(name)
	if err != nil {
		panic(err) // a name of this file's, which every build has
	}
	return d.Migrations()
}

// The default table names the migrations are written for, and the table
// Migrate records applied versions in.
const (
	// DefaultOutboxTable is the outbox table the migrations make,
	// "outbox_messages" (outboxhook.DefaultTable).
	DefaultOutboxTable = store.DefaultOutbox
	// DefaultInboxTable is the inbox table the migrations make,
	// "inbox_messages" (inbox.DefaultTable).
	DefaultInboxTable = store.DefaultInbox
	// VersionTable is the table Migrate records applied versions in,
	// "herald_schema_migrations".
	VersionTable = store.MigrationsTable
)

// Databases are the names of the databases Herald has migrations for, as
// ForDatabase takes them and the *gorm.DB dialects name them.
func Databases() []string { return drivers.Names() }

// ForDatabase returns the migrations of a database by name: "postgres",
// "sqlite" or "mysql" (MySQL and MariaDB).
func ForDatabase(name string) (fs.FS, error) {
	d, err := drivers.ByName(name)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return d.Migrations(), nil
}

// Migration is one numbered migration of a set.
type Migration struct {
	// Version is its number, 1 and up, in one sequence across the set.
	Version int64
	// Name is what it makes or changes ("outbox_messages", "outbox_upgrade").
	Name string
	// Up and Down are its files in the set ("0001_outbox_messages.up.sql").
	Up, Down string
}

// String is the migration as its files are named: "0001_outbox_messages".
func (m Migration) String() string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }

// List returns the migrations of fsys (one of this package's sets, such as
// Postgres() or ForDatabase("mysql")), in version order.
func List(fsys fs.FS) ([]Migration, error) {
	migs, err := migrate.Migrations(fsys)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	out := make([]Migration, len(migs))
	for i, m := range migs {
		out[i] = Migration{Version: m.Version, Name: m.Name, Up: m.Up, Down: m.Down}
	}
	return out, nil
}

// State is a migration of a database and whether it is applied there.
type State struct {
	Migration
	// Applied reports that its version is recorded in VersionTable.
	Applied bool
}

// Status lists the migrations of db's database, in version order, each with
// whether it is recorded as applied. A database where Migrate never ran (no
// VersionTable) has every migration not applied, even where Herald created
// its tables itself: Migrate then records them.
func Status(ctx context.Context, db *gorm.DB) ([]State, error) {
	conn, err := drivers.Open(db, "")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	migs, err := List(conn.Driver.Migrations())
	if err != nil {
		return nil, err
	}
	ok, err := conn.Driver.Outbox(ident.MustTable(store.MigrationsTable)).Exists(ctx, conn.DB)
	if err != nil {
		return nil, fmt.Errorf("migrations: look up %s: %w", store.MigrationsTable, err)
	}
	var applied []int64
	if ok {
		if applied, err = migrate.AppliedVersions(ctx, conn.DB); err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
	}
	out := make([]State, len(migs))
	for i, m := range migs {
		out[i] = State{Migration: m, Applied: slices.Contains(applied, m.Version)}
	}
	return out, nil
}

// For returns the migrations of db's database.
func For(db *gorm.DB) (fs.FS, error) {
	d, err := drivers.For(db)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return d.Migrations(), nil
}

// Migrate applies the migrations of db's database that are not yet recorded in
// herald_schema_migrations, in order, each in a transaction where the database
// allows DDL in one, and returns the versions it applied.
//
// Each statement that makes a table, an index or a column runs only when it is
// missing (looked up first), and a data step only when its check finds its
// rows missing. So Migrate over tables Herald created itself (nothing
// recorded) keeps them, makes what they lack, records every version, and
// leaves the schema Migrate alone makes; it brings tables an earlier release
// made to today's shape (0004); and Herald creating its tables after Migrate
// finds nothing to do.
func Migrate(ctx context.Context, db *gorm.DB) ([]int64, error) {
	d, err := drivers.For(db)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return MigrateFS(ctx, db, d.Migrations())
}

// MigrateFS is Migrate with the migrations of fsys, one of this package's sets
// for db's database: PostgresPartitioned, for retention by partition drop.
func MigrateFS(ctx context.Context, db *gorm.DB, fsys fs.FS) ([]int64, error) {
	conn, err := drivers.Open(db, "")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	done, err := migrate.MigrateFS(ctx, conn.DB, conn.Driver, fsys)
	if err != nil {
		return done, fmt.Errorf("migrations: %w", err)
	}
	return done, nil
}

// Applied returns the versions recorded in herald_schema_migrations; it fails
// when that table is missing (see Status).
func Applied(ctx context.Context, db *gorm.DB) ([]int64, error) {
	conn, err := drivers.Open(db, "")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return migrate.AppliedVersions(ctx, conn.DB)
}

// Goose returns fsys (one of this package's sets) as goose reads migrations:
// one NNNN_name.sql per version, the up file (which starts with -- +goose Up)
// followed by the down file (-- +goose Down).
func Goose(fsys fs.FS) (fs.FS, error) {
	migs, err := migrate.Migrations(fsys)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	out := memfs.FS{}
	for _, m := range migs {
		up, err := fs.ReadFile(fsys, m.Up)
		if err != nil {
			return nil, err
		}
		down, err := fs.ReadFile(fsys, m.Down)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("%04d_%s.sql", m.Version, m.Name)
		out[name] = append(append(up, '\n'), down...)
	}
	return out, nil
}
