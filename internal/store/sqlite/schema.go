package sqlite

import (
	"context"
	"embed"
	"io/fs"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are SQLite's numbered migrations.
func Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// Migrations returns Migrations().
func (Driver) Migrations() fs.FS { return Migrations() }

// MigrationsTableSQL creates store.MigrationsTable.
func (Driver) MigrationsTableSQL() string {
	return `CREATE TABLE IF NOT EXISTS ` + store.MigrationsTable + ` (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL DEFAULT (` + Now + `)
)`
}

// RecordMigrationSQL records a version.
func (Driver) RecordMigrationSQL() string {
	return `INSERT INTO ` + store.MigrationsTable + ` (version, name) VALUES (?, ?)`
}

// exists reports whether the table or index named n exists.
func exists(ctx context.Context, x store.Execer, n ident.Table) (bool, error) {
	master := "sqlite_schema"
	if n.Schema != "" {
		master = n.Schema.Quoted() + ".sqlite_schema"
	}
	return sqlkit.Found(ctx, x, `SELECT 1 FROM `+master+` WHERE name = ? AND type IN ('table', 'index')`, string(n.Name))
}

// ObjectExists reports whether what the migration statement o makes exists.
func (Driver) ObjectExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	return objectExists(ctx, x, o)
}

func objectExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	switch o.Kind {
	case store.KindColumn:
		schema := "main"
		if o.Name.Schema != "" {
			schema = string(o.Name.Schema)
		}
		return sqlkit.Found(ctx, x, `SELECT 1 FROM pragma_table_info(?, ?) WHERE name = ?`,
			string(o.Name.Name), schema, o.Column)
	case store.KindStep:
		return sqlkit.Found(ctx, x, o.Check)
	}
	return exists(ctx, x, o.Name)
}

// schema is what Herald creates and checks from the migrations.
var schema = migrate.Schema{FS: Migrations(), Quote: ident.Table.Quoted, Exists: objectExists, Atomic: true}
