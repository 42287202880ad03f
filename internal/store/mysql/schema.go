package mysql

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

// Migrations are MySQL's numbered migrations.
func Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// Migrations returns Migrations().
func (Driver) Migrations() fs.FS { return Migrations() }

// MigrationsTableSQL creates store.MigrationsTable.
func (Driver) MigrationsTableSQL() string {
	return `CREATE TABLE IF NOT EXISTS ` + store.MigrationsTable + ` (
    version    BIGINT       NOT NULL PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`
}

// RecordMigrationSQL records a version.
func (Driver) RecordMigrationSQL() string {
	return `INSERT INTO ` + store.MigrationsTable + ` (version, name) VALUES (?, ?)`
}

// exists reports whether the table, or the index, named n exists.
func exists(ctx context.Context, x store.Execer, n ident.Table, index bool, on ident.Table) (bool, error) {
	schema := any(nil)
	if n.Schema != "" {
		schema = string(n.Schema)
	}
	q := `SELECT 1 FROM information_schema.tables WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?`
	args := []any{schema, string(n.Name)}
	if index {
		q = `SELECT 1 FROM information_schema.statistics WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND index_name = ?`
		args = []any{schema, string(on.Name), string(n.Name)}
	}
	return sqlkit.Found(ctx, x, q, args...)
}

// ObjectExists reports whether what the migration statement o makes exists.
func (Driver) ObjectExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	return objectExists(ctx, x, o)
}

func objectExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	switch o.Kind {
	case store.KindColumn:
		schema := any(nil)
		if o.Name.Schema != "" {
			schema = string(o.Name.Schema)
		}
		return sqlkit.Found(ctx, x, `SELECT 1 FROM information_schema.columns
WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND column_name = ?`, schema, string(o.Name.Name), o.Column)
	case store.KindStep:
		return sqlkit.Found(ctx, x, o.Check)
	case store.KindIndex:
		return exists(ctx, x, o.Name, true, o.On)
	}
	return exists(ctx, x, o.Name, false, o.Name)
}

// schema is what Herald creates and checks from the migrations (MySQL's
// CREATE INDEX has no IF NOT EXISTS: each object is looked up first).
var schema = migrate.Schema{FS: Migrations(), Quote: Quote, Exists: objectExists}
