package postgres

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/memfs"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

//go:embed migrations/*.sql
var migrations embed.FS

//go:embed migrations/partitioned/*.sql
var partitioned embed.FS

// Migrations are PostgreSQL's numbered migrations.
func Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// PartitionedMigrations are Migrations with the outbox partitioned by
// occurred_at (0001 replaced), for retention by partition drop.
func PartitionedMigrations() fs.FS {
	out := memfs.FS{}
	for _, set := range []fs.FS{Migrations(), partitionedOnly()} {
		names, _ := fs.Glob(set, "*.sql")
		for _, n := range names {
			out[n], _ = fs.ReadFile(set, n)
		}
	}
	return out
}

func partitionedOnly() fs.FS {
	sub, _ := fs.Sub(partitioned, "migrations/partitioned")
	return sub
}

// Migrations returns Migrations().
func (Driver) Migrations() fs.FS { return Migrations() }

// MigrationsTableSQL creates store.MigrationsTable.
func (Driver) MigrationsTableSQL() string {
	return `CREATE TABLE IF NOT EXISTS ` + store.MigrationsTable + ` (
    version    bigint      PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
}

// RecordMigrationSQL records a version.
func (Driver) RecordMigrationSQL() string {
	return `INSERT INTO ` + store.MigrationsTable + ` (version, name) VALUES ($1, $2)`
}

// exists reports whether the relation (quoted, qualified name) exists.
func exists(ctx context.Context, x store.Execer, quoted string) (bool, error) {
	var found sql.NullString
	err := sqlkit.QueryRow(ctx, x, `SELECT to_regclass($1)::text`, []any{quoted}, &found)
	return found.Valid, err
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
	args = append(args, o.Name.Quoted())
	rel := fmt.Sprintf("to_regclass($%d)", len(args))
	if o.Kind == store.KindColumn {
		args = append(args, o.Column)
		return fmt.Sprintf(`EXISTS (SELECT 1 FROM pg_attribute
WHERE attrelid = %s AND attname = $%d AND attnum > 0 AND NOT attisdropped)`, rel, len(args)), args
	}
	return rel + " IS NOT NULL", args
})

// schema is what Herald creates and checks from the migrations; partitioned
// the same from the partitioned set.
var (
	schema            = migrate.Schema{FS: Migrations(), Quote: ident.Table.Quoted, Exists: objectExists, ExistsAll: objectsExist, Atomic: true}
	partitionedSchema = migrate.Schema{FS: PartitionedMigrations(), Quote: ident.Table.Quoted, Exists: objectExists, ExistsAll: objectsExist, Atomic: true}
)
