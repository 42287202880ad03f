package sqlite

import (
	"context"
	"embed"
	"encoding/json"
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
var schema = migrate.Schema{FS: Migrations(), Quote: ident.Table.Quoted, Exists: schemaExists, Atomic: true}

// schemaExists is objectExists for self-creation and the check at start, but
// that an index on a column its table (which exists) lacks counts as there:
// the index of a migration that also adds its columns (0006_schedule's) to
// an outbox made before it, which self-creation does not alter. Creating it
// would fail (no such column) before the check could name the migration to
// run; the check, which requires the columns, names it, and Migrate (through
// Driver.ObjectExists) makes both.
func schemaExists(ctx context.Context, x store.Execer, o store.Object) (bool, error) {
	ok, err := objectExists(ctx, x, o)
	if ok || err != nil || o.Kind != store.KindIndex {
		return ok, err
	}
	cols := indexColumns(o.SQL)
	if len(cols) == 0 {
		return false, nil
	}
	schema := "main"
	if o.On.Schema != "" {
		schema = string(o.On.Schema)
	}
	names, _ := json.Marshal(cols)
	var all, have int
	err = sqlkit.QueryRow(ctx, x, `SELECT count(*), coalesce(sum(name IN (SELECT value FROM json_each(?3))), 0) FROM pragma_table_info(?1, ?2)`,
		[]any{string(o.On.Name), schema, string(names)}, &all, &have)
	return all > 0 && have < len(cols), err
}

// indexColumnList is the column list of a CREATE INDEX statement, after the
// table it is on.
var indexColumnList = regexp.MustCompile(`(?is)\sON\s+[^(]+\(([^()]*)\)`)

// indexColumns are the columns a CREATE INDEX statement indexes
// ("(available_at, seq) WHERE ...": available_at and seq); nil when it
// indexes an expression.
func indexColumns(stmt string) []string {
	m := indexColumnList.FindStringSubmatch(stmt)
	if m == nil {
		return nil
	}
	var out []string
	for part := range strings.SplitSeq(m[1], ",") {
		if f := strings.Fields(part); len(f) > 0 {
			out = append(out, strings.Trim(f[0], `"`))
		}
	}
	return out
}
