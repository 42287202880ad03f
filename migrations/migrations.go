// Package migrations holds Herald's database schema as numbered migrations,
// one set per database, and applies them.
//
// Each set is an fs.FS of NNNN_name.up.sql / NNNN_name.down.sql pairs in one
// number sequence across the outbox, the relay's additions and the inbox, for
// the default table names (outbox_messages, inbox_messages). golang-migrate runs
// them as they are (source iofs); goose runs them through [Goose], which joins
// each pair into one annotated file. [Migrate] applies them itself and records
// each version in herald_schema_migrations, so that a later release can change
// the schema.
//
// Herald also creates its tables when they are missing (and leaves them alone
// when present), so migrations are for deployments where the application's
// roles may not create tables, or that manage schema with a tool.
package migrations

import (
	"context"
	"fmt"
	"io/fs"
	"testing/fstest"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/mysql"
	"github.com/heraldgo/herald/internal/store/postgres"
	"github.com/heraldgo/herald/internal/store/sqlite"
)

// Postgres returns the PostgreSQL migrations.
func Postgres() fs.FS { return postgres.Migrations() }

// PostgresPartitioned returns the PostgreSQL migrations with the outbox
// partitioned by occurred_at (its 0001 replaced, the rest the same): the schema
// for retention by partition drop (relay.Config.DropPartitions).
func PostgresPartitioned() fs.FS { return postgres.PartitionedMigrations() }

// SQLite returns the SQLite migrations.
func SQLite() fs.FS { return sqlite.Migrations() }

// MySQL returns the MySQL/MariaDB migrations.
func MySQL() fs.FS { return mysql.Migrations() }

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
func Migrate(ctx context.Context, db *gorm.DB) ([]int64, error) {
	d, err := drivers.For(db)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	done, err := store.Migrate(ctx, sqlDB, d)
	if err != nil {
		return done, fmt.Errorf("migrations: %w", err)
	}
	return done, nil
}

// Applied returns the versions recorded in herald_schema_migrations.
func Applied(ctx context.Context, db *gorm.DB) ([]int64, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return store.AppliedVersions(ctx, sqlDB)
}

// Goose returns fsys (one of this package's sets) as goose reads migrations:
// one NNNN_name.sql per version, the up file (which starts with -- +goose Up)
// followed by the down file (-- +goose Down).
func Goose(fsys fs.FS) (fs.FS, error) {
	migs, err := store.Migrations(fsys)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	out := fstest.MapFS{}
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
		out[name] = &fstest.MapFile{Data: append(append(up, '\n'), down...), Mode: 0o444}
	}
	return out, nil
}
