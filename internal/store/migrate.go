package store

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/heraldgo/herald/internal/ident"
)

// Default names the migration files use; a table configured under another name
// gets the same statements with its names put in (Render).
const (
	DefaultOutbox = "outbox_messages"
	DefaultInbox  = "inbox_messages"
)

// Migration is one numbered migration of a database.
type Migration struct {
	Version  int64
	Name     string // "outbox_messages"
	Up, Down string // file names in the driver's Migrations FS
}

var migrationFile = regexp.MustCompile(`^(\d+)_(.+)\.(up|down)\.sql$`)

// Migrations lists the migrations in fsys (NNNN_name.up.sql / .down.sql pairs),
// in version order.
func Migrations(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	byVersion := map[int64]*Migration{}
	for _, n := range names {
		m := migrationFile.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		v, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", n, err)
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if m[3] == "up" {
			mig.Up = n
		} else {
			mig.Down = n
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migration %d_%s: needs both an up and a down file", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Migration) int { return int(a.Version - b.Version) })
	return out, nil
}

// Statements reads file from fsys and splits it into statements: comment lines
// dropped, a statement ending with a line that ends in ";".
func Statements(fsys fs.FS, file string) ([]string, error) {
	b, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, err
	}
	var (
		out []string
		cur strings.Builder
	)
	for line := range strings.SplitSeq(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out, nil
}

// Render puts table t where a migration statement names the default table def
// (quoted with q's quote character): the table itself and the tables derived
// from it (def_leases) qualified as t is, the indexes and keys derived from it
// (def_*_idx, def_*_key) unqualified, as index names are.
func Render(stmt, def string, t ident.Table, quote func(ident.Table) string) string {
	qc := quote(ident.Table{Name: "x"})[:1] // the quote character
	re := regexp.MustCompile(regexp.QuoteMeta(qc+def) + `(_[a-z_]+)?` + regexp.QuoteMeta(qc))
	return re.ReplaceAllStringFunc(stmt, func(m string) string {
		suffix := strings.TrimSuffix(strings.TrimPrefix(m, qc+def), qc)
		switch {
		case suffix == "":
			return quote(t)
		case strings.HasSuffix(suffix, "_idx"), strings.HasSuffix(suffix, "_key"):
			return quote(ident.Table{Name: t.Derived(suffix).Name})
		default:
			return quote(t.Derived(suffix))
		}
	})
}

// Object is what one DDL statement creates, so that it can be looked for before
// it is created (a role without DDL rights then works once it exists).
type Object struct {
	SQL   string
	After []string    // statements that fill what SQL created (seed rows), run right after it
	Name  ident.Table // the table or index it creates (the table it adds Column to)
	Index bool        // an index: it only makes things faster
	// Column is the column an ALTER TABLE ... ADD COLUMN adds to the table
	// Name; "" for a CREATE.
	Column string
}

var (
	created = regexp.MustCompile(`(?is)^\s*CREATE\s+(UNIQUE\s+)?(TABLE|INDEX)\s+(IF\s+NOT\s+EXISTS\s+)?(\S+)`)
	added   = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(\S+)\s+ADD\s+(COLUMN\s+)?(IF\s+NOT\s+EXISTS\s+)?(\S+)`)
)

// Objects renders the statements of migration file for table t and says what
// each creates (a table, an index, or a column ALTER TABLE adds).
func Objects(fsys fs.FS, file, def string, t ident.Table, quote func(ident.Table) string) ([]Object, error) {
	stmts, err := Statements(fsys, file)
	if err != nil {
		return nil, err
	}
	out := make([]Object, 0, len(stmts))
	for _, s := range stmts {
		if m := added.FindStringSubmatch(s); m != nil {
			name := strings.Trim(m[1], "\"`")
			out = append(out, Object{SQL: Render(s, def, t, quote), Name: t.Derived(strings.TrimPrefix(name, def)),
				Column: strings.Trim(m[4], "\"`")})
			continue
		}
		m := created.FindStringSubmatch(s)
		if m == nil {
			if len(out) == 0 {
				return nil, fmt.Errorf("%s: a statement before any CREATE TABLE or CREATE INDEX: %.40s", file, s)
			}
			last := &out[len(out)-1]
			last.After = append(last.After, Render(s, def, t, quote))
			continue
		}
		name := strings.Trim(m[4], "\"`")
		o := Object{SQL: Render(s, def, t, quote), Index: strings.EqualFold(m[2], "INDEX")}
		suffix := strings.TrimPrefix(name, def)
		o.Name = t.Derived(suffix)
		out = append(out, o)
	}
	return out, nil
}

// CreateMissing runs the statements of objs, each only when exists says the
// object it creates is missing (so that a role without DDL rights works
// against tables the migrations made).
func CreateMissing(ctx context.Context, x Execer, objs []Object, exists func(Object) (bool, error)) error {
	for _, o := range objs {
		ok, err := exists(o)
		if err != nil {
			return fmt.Errorf("look up %s: %w", o.Name, err)
		}
		if ok {
			continue
		}
		for _, q := range append([]string{o.SQL}, o.After...) {
			if _, err := x.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("create %s: %w", o.Name, err)
			}
		}
	}
	return nil
}

// MigrationsTable is the table Migrate records applied versions in.
const MigrationsTable = "herald_schema_migrations"

// Migrate applies the migrations of d not yet recorded in MigrationsTable (for
// the default table names), each in a transaction where the database allows
// DDL in one, and records each version. It returns the versions it applied.
func Migrate(ctx context.Context, db DB, d Driver) ([]int64, error) {
	migs, err := Migrations(d.Migrations())
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, d.MigrationsTableSQL()); err != nil {
		return nil, fmt.Errorf("create %s: %w", MigrationsTable, err)
	}
	applied, err := AppliedVersions(ctx, db)
	if err != nil {
		return nil, err
	}
	var done []int64
	for _, m := range migs {
		if slices.Contains(applied, m.Version) {
			continue
		}
		stmts, err := Statements(d.Migrations(), m.Up)
		if err != nil {
			return done, err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return done, err
		}
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				_ = tx.Rollback()
				return done, fmt.Errorf("migration %d_%s: %w", m.Version, m.Name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, d.RecordMigrationSQL(), m.Version, m.Name); err != nil {
			_ = tx.Rollback()
			return done, fmt.Errorf("record migration %d: %w", m.Version, err)
		}
		if err := tx.Commit(); err != nil {
			return done, fmt.Errorf("migration %d_%s: %w", m.Version, m.Name, err)
		}
		done = append(done, m.Version)
	}
	return done, nil
}

// AppliedVersions lists the versions recorded in MigrationsTable.
func AppliedVersions(ctx context.Context, db Execer) ([]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT version FROM `+MigrationsTable+` ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", MigrationsTable, err)
	}
	defer func() { _ = rows.Close() }()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
