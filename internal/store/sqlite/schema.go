package sqlite

import (
	"context"
	"embed"
	"io/fs"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
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
	return objectExists(ctx, x, store.Object{Kind: store.KindTable, Name: n})
}

// ObjectExists reports whether what the migration statement o makes exists.
func (Driver) ObjectExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	return objectExists(ctx, x, o)
}

// objectExists looks o up alone (objectsExist), a step by its check.
var objectExists = migrate.One(objectsExist)

// ObjectsExist reports whether each of objs (tables, indexes and columns)
// exists, in one statement.
func (Driver) ObjectsExist(ctx context.Context, x store.Execer, objs []store.Object) ([]bool, error) {
	return objectsExist(ctx, x, objs)
}

// objectsExist reports whether each of objs (tables, indexes and columns)
// exists, in one statement: a column of the row for each.
var objectsExist = migrate.All(func(o store.Object, args []any) (string, []any) {
	if o.Kind == store.KindColumn {
		schema := "main"
		if o.Name.Schema != "" {
			schema = string(o.Name.Schema)
		}
		return `EXISTS (SELECT 1 FROM pragma_table_info(?, ?) WHERE name = ?)`, append(args, string(o.Name.Name), schema, o.Column)
	}
	master := "sqlite_schema"
	if o.Name.Schema != "" {
		master = o.Name.Schema.Quoted() + ".sqlite_schema"
	}
	return `EXISTS (SELECT 1 FROM ` + master + ` WHERE name = ? AND type IN ('table', 'index'))`, append(args, string(o.Name.Name))
})

// schema is what Herald creates and checks from the migrations.
var schema = migrate.Schema{FS: Migrations(), Quote: ident.Table.Quoted, Exists: objectExists, ExistsAll: objectsExist, Atomic: true}
