package mysql

import (
	"context"
	"embed"
	"io/fs"
	"regexp"
	"strings"

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
var schema = migrate.Schema{FS: Migrations(), Quote: Quote, Exists: schemaExists}

// schemaExists is objectExists for self-creation and the check at start, but
// that an index on a column its table lacks counts as there: the index of a
// migration that also adds its columns (0007_schedule's) to an outbox made
// before it, which self-creation does not alter. Creating it would fail
// (1072, no such column) before the check could name the migration to run;
// the check, which requires the columns, names it, and Migrate makes both.
func schemaExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	ok, err := objectExists(ctx, x, o)
	if ok || err != nil || o.Kind != store.KindIndex {
		return ok, err
	}
	cols := indexColumns(o.SQL)
	if len(cols) == 0 {
		return false, nil
	}
	schema := any(nil)
	if o.On.Schema != "" {
		schema = string(o.On.Schema)
	}
	// The table's columns, and of them the index's: an index on a table
	// that does not exist is missing (its creation names the table).
	var all, have int
	err = sqlkit.QueryRow(ctx, x, `SELECT COUNT(*), COALESCE(SUM(column_name IN (`+placeholders(len(cols))+`)), 0)
FROM information_schema.columns WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?`,
		append(anys(cols), schema, string(o.On.Name)), &all, &have)
	return all > 0 && have < len(cols), err
}

// indexColumnList is the column list that ends a CREATE INDEX statement.
var indexColumnList = regexp.MustCompile(`\(([^()]*)\)\s*$`)

// indexColumns are the columns a CREATE INDEX statement names ("dead_at
// DESC, seq": dead_at and seq); nil when it names none this way.
func indexColumns(stmt string) []string {
	m := indexColumnList.FindStringSubmatch(stmt)
	if m == nil {
		return nil
	}
	var out []string
	for part := range strings.SplitSeq(m[1], ",") {
		if f := strings.Fields(part); len(f) > 0 {
			out = append(out, strings.Trim(f[0], "`"))
		}
	}
	return out
}
