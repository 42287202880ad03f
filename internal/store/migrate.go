package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
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

// statements reads file from fsys and splits it into statements: comment
// lines dropped, a statement ending with a line that ends in ";". Two kinds of
// comment are Herald's own (goose and golang-migrate read them as comments):
// a line starting "-- herald: " is a line of a statement only Herald runs
// (one whose effect plain SQL cannot make conditional: Herald looks it up
// first), and "-- herald:check <query>" is the query that tells whether the
// next statement's effect is there already (Object.Check).
func statements(fsys fs.FS, file string) ([]statement, error) {
	b, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, err
	}
	var (
		out   []statement
		cur   strings.Builder
		check string
	)
	for line := range strings.SplitSeq(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, heraldCheck):
			check = strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(trimmed, heraldCheck)), ";")
			continue
		case strings.HasPrefix(trimmed, heraldLine):
			line = strings.TrimPrefix(trimmed, heraldLine)
			trimmed = strings.TrimSpace(line)
		case trimmed == "", strings.HasPrefix(trimmed, "--"):
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, statement{strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"), check})
			cur.Reset()
			check = ""
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, statement{s, check})
	}
	return out, nil
}

// statement is one statement of a migration file, with its check.
type statement struct{ sql, check string }

const (
	heraldLine  = "-- herald: "
	heraldCheck = "-- herald:check "
)

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

// Kind is what a migration statement makes.
type Kind int

const (
	// KindTable is a CREATE TABLE.
	KindTable Kind = iota
	// KindIndex is a CREATE INDEX: it only makes things faster.
	KindIndex
	// KindColumn is an ALTER TABLE ... ADD COLUMN (one column a statement).
	KindColumn
	// KindStep is any other statement that does not follow one of the above
	// in its file (a data step: seed rows, say), or one with a check.
	KindStep
)

// Object is what one statement of a migration makes, so that it can be looked
// for before it is made (a role without DDL rights then works once it exists;
// Migrate then works over what Herald created itself), and looked for at start
// (CheckSchema).
type Object struct {
	File  string // the migration file, "0004_outbox_upgrade.up.sql"
	Kind  Kind
	SQL   string
	After []string // statements that fill what SQL made (seed rows, backfills), run right after it

	// Name is the table or index a CREATE makes, the table a column is added
	// to, or the table a step writes.
	Name ident.Table
	// On is an index's table.
	On ident.Table
	// Column is the column a KindColumn adds.
	Column string
	// Check, for a step, is a query that returns a row when the step's effect
	// is there already (then it is not run, and the schema is up to date); a
	// step without one always runs in Migrate and is never checked.
	Check string
	// Replaces says that an index's migration drops another index after
	// making it (After): a change to the table, which self-creation makes
	// only on a table it made in the same call.
	Replaces bool
}

// Migration names the migration an object comes from ("0004_outbox_upgrade").
func (o Object) Migration() string { return strings.TrimSuffix(o.File, ".up.sql") }

var (
	createdRE   = regexp.MustCompile(`(?is)^\s*CREATE\s+(UNIQUE\s+)?(TABLE|INDEX)\s+(IF\s+NOT\s+EXISTS\s+)?([^\s(]+)(?:\s+ON\s+([^\s(]+))?`)
	dropIndexRE = regexp.MustCompile(`(?is)^\s*DROP\s+INDEX\s`)
	columnRE    = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(\S+)\s+ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(\S+)`)
	stepRE      = regexp.MustCompile(`(?is)^\s*(?:INSERT\s+(?:IGNORE\s+)?INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)\s+([^\s(]+)`)
)

// Objects renders the statements of migration file for table t and says what
// each makes: the names in the file that are def or derived from it (def_*)
// become t's (Render); with def "" nothing is rendered.
func Objects(fsys fs.FS, file, def string, t ident.Table, quote func(ident.Table) string) ([]Object, error) {
	stmts, err := statements(fsys, file)
	if err != nil {
		return nil, err
	}
	render := func(s string) string {
		if def == "" {
			return s
		}
		return Render(s, def, t, quote)
	}
	name := func(quoted string) ident.Table {
		n := strings.Trim(quoted, "\"`")
		if def == "" || !derives(n, def) {
			return ident.Table{Name: ident.Name(n)}
		}
		return t.Derived(strings.TrimPrefix(n, def))
	}
	out := make([]Object, 0, len(stmts))
	for _, s := range stmts {
		o := Object{File: file, SQL: render(s.sql)}
		if m := createdRE.FindStringSubmatch(s.sql); m != nil {
			o.Kind, o.Name = KindTable, name(m[4])
			if strings.EqualFold(m[2], "INDEX") {
				o.Kind, o.On = KindIndex, name(m[5])
			}
		} else if m := columnRE.FindStringSubmatch(s.sql); m != nil {
			o.Kind, o.Name, o.Column = KindColumn, name(m[1]), strings.Trim(m[2], "\"`")
		} else if len(out) > 0 && s.check == "" {
			last := &out[len(out)-1]
			last.After = append(last.After, o.SQL)
			last.Replaces = last.Replaces || (last.Kind == KindIndex && dropIndexRE.MatchString(s.sql))
			continue
		} else {
			o.Kind, o.Check = KindStep, render(s.check)
			if m := stepRE.FindStringSubmatch(s.sql); m != nil {
				o.Name = name(m[1])
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// derives reports whether name is def or a name derived from it (def_*).
func derives(name, def string) bool {
	return name == def || strings.HasPrefix(name, def+"_")
}

// SchemaObjects returns the objects of every migration in fsys, in version
// order, that are on the default table def or on a table derived from it,
// rendered for t: the one definition of what Herald creates itself and checks
// at start, so that a migration added later is covered with no code change.
func SchemaObjects(fsys fs.FS, def string, t ident.Table, quote func(ident.Table) string) ([]Object, error) {
	migs, err := Migrations(fsys)
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, m := range migs {
		objs, err := Objects(fsys, m.Up, def, t, quote)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if o.Kind == KindIndex {
				if on := o.On.Name; on != "" && derivesTable(o.On, t) {
					out = append(out, o)
				}
				continue
			}
			if derivesTable(o.Name, t) {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// derivesTable reports whether n (rendered) is t or a table derived from it.
func derivesTable(n, t ident.Table) bool {
	return n.Schema == t.Schema && derives(string(n.Name), string(t.Name))
}

// Catalog looks up whether what o makes exists (its table, index or column;
// for a step, whether its check returns a row).
type Catalog func(ctx context.Context, x Execer, o Object) (bool, error)

// Found reports whether q returns a row (a step's check, a catalog lookup).
func Found(ctx context.Context, x Execer, q string, args ...any) (bool, error) {
	rows, err := x.QueryContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	defer func() { _ = rows.Close() }()
	found := rows.Next()
	return found, rows.Err()
}

// CreateMissing makes, of objs, the tables and indexes that exists says are
// missing, and the columns and replacing indexes (Object.Replaces) of the
// tables it made in this call that are missing (a table made by an earlier
// migration and altered by a later one). It never alters a table that was
// there before but to add an index, and runs no step: an outdated table is
// for Migrate, and CheckSchema names the migration. An index whose creation
// fails is left out when skip says so. A role without DDL rights works where
// everything exists.
func CreateMissing(ctx context.Context, x Execer, objs []Object, exists Catalog, skip func(name string, err error) bool) error {
	made := map[string]bool{}
	for _, o := range objs {
		switch o.Kind {
		case KindStep:
			continue
		case KindColumn:
			if !made[o.Name.String()] {
				continue
			}
		case KindIndex:
			if o.Replaces && !made[o.On.String()] {
				continue
			}
		}
		ok, err := exists(ctx, x, o)
		if err != nil {
			return fmt.Errorf("look up %s: %w", describe(o), err)
		}
		if ok {
			continue
		}
		if _, err := x.ExecContext(ctx, o.SQL); err != nil {
			// Another instance making the same objects at this moment made
			// this one first (MySQL: 1061 duplicate key name; PostgreSQL: a
			// unique violation in its catalog): go on to the rest, which
			// may be this call's to make (a later column of a table made
			// here).
			if again, e := exists(ctx, x, o); e == nil && again {
				continue
			}
			if o.Kind == KindIndex && skip != nil && skip(o.Name.String(), err) {
				continue
			}
			return fmt.Errorf("create %s: %w", describe(o), err)
		}
		for _, q := range o.After {
			if _, err := x.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("create %s: %w", describe(o), err)
			}
		}
		if o.Kind == KindTable {
			made[o.Name.String()] = true
		}
	}
	return nil
}

// ErrSchemaOutdated is returned (wrapped) at start when a table Herald uses
// lacks a table, column or row that a migration makes; the message names the
// migration to run.
var ErrSchemaOutdated = errors.New("schema outdated")

// CheckSchema returns ErrSchemaOutdated, naming the migration to run, for the
// first of objs (tables, columns, checked steps) that exists says is missing;
// indexes are not required. Nothing is checked while the first table of objs
// (the one the others hang on) does not exist: a missing table is not an
// outdated one. It reads catalogs only: no DDL, no lock but a reader's. A
// schema that seems outdated is looked at again for about a second (another
// instance may be making it) before the error.
func CheckSchema(ctx context.Context, x Execer, objs []Object, exists Catalog) error {
	err := checkSchema(ctx, x, objs, exists)
	// Another instance may be creating the same tables at this moment: the
	// one that made a table adds the later migrations' columns to it right
	// after (CreateMissing), and the others see the table before them. Look
	// again a few times, for about a second, before calling it outdated.
	for i := 0; i < outdatedRechecks && errors.Is(err, ErrSchemaOutdated); i++ {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(outdatedRecheckEvery):
		}
		err = checkSchema(ctx, x, objs, exists)
	}
	return err
}

// How often and how long CheckSchema looks again at a schema that seems
// outdated.
const (
	outdatedRechecks     = 4
	outdatedRecheckEvery = 250 * time.Millisecond
)

func checkSchema(ctx context.Context, x Execer, objs []Object, exists Catalog) error {
	first := true
	for _, o := range objs {
		if o.Kind == KindIndex || (o.Kind == KindStep && o.Check == "") {
			continue
		}
		ok, err := exists(ctx, x, o)
		if err != nil {
			return fmt.Errorf("look up %s: %w", describe(o), err)
		}
		if first && o.Kind == KindTable {
			first = false
			if !ok {
				return nil
			}
			continue
		}
		first = false
		if !ok {
			return fmt.Errorf("%w: %s is missing: run migration %s (migrations.Migrate applies it to the default tables)",
				ErrSchemaOutdated, describe(o), o.Migration())
		}
	}
	return nil
}

// describe names what o makes, for messages.
func describe(o Object) string {
	switch o.Kind {
	case KindIndex:
		return "index " + o.Name.String()
	case KindColumn:
		return "column " + o.Column + " of " + o.Name.String()
	case KindStep:
		return "the rows of " + o.Name.String()
	}
	return "table " + o.Name.String()
}

// Migrate applies the migrations of d not yet recorded in MigrationsTable (for
// the default table names), each in a transaction where the database allows
// DDL in one, and records each version. It returns the versions it applied.
//
// A statement that makes a table, an index or a column runs only when
// d.ObjectExists says it is missing, and a step with a check only when the
// check finds nothing (the statements that follow one run with it): so
// Migrate over tables Herald created itself (no version recorded) keeps them,
// makes what they lack, brings a table an earlier release made to today's
// shape, records every version, and leaves the schema Migrate alone makes.
func Migrate(ctx context.Context, db DB, d Driver) ([]int64, error) {
	return MigrateFS(ctx, db, d, d.Migrations())
}

// MigrateFS is Migrate with the migrations read from fsys (a set of d's: the
// partitioned PostgreSQL set, say).
func MigrateFS(ctx context.Context, db DB, d Driver, fsys fs.FS) ([]int64, error) {
	migs, err := Migrations(fsys)
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
		objs, err := Objects(fsys, m.Up, "", ident.Table{}, d.Quote)
		if err != nil {
			return done, err
		}
		err = InTx(ctx, db, nil, func(tx Execer) error {
			for _, o := range objs {
				if o.Kind != KindStep || o.Check != "" {
					ok, err := d.ObjectExists(ctx, tx, o)
					if err != nil {
						return fmt.Errorf("look up %s: %w", describe(o), err)
					}
					if ok {
						continue
					}
				}
				for _, q := range append([]string{o.SQL}, o.After...) {
					if _, err := tx.ExecContext(ctx, q); err != nil {
						return err
					}
				}
			}
			if _, err := tx.ExecContext(ctx, d.RecordMigrationSQL(), m.Version, m.Name); err != nil {
				return fmt.Errorf("record: %w", err)
			}
			return nil
		})
		if err != nil {
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

// Schema is one database's migrations and catalog: what Herald creates itself
// and checks at start for one outbox or inbox table, from every migration of
// the set (Outbox-, Relay- and InboxObjects).
type Schema struct {
	FS     fs.FS
	Quote  func(ident.Table) string
	Exists Catalog
	// Atomic says the database runs DDL in a transaction (PostgreSQL and
	// SQLite; not MySQL, whose DDL commits at once): each creation then runs
	// in one, a savepoint around each statement, so that a connection cut or
	// a process killed between a table and the column a later migration adds
	// to it leaves neither (the next start makes both), never a table that
	// is outdated until Migrate runs. Locks the creation takes (an index
	// build's SHARE lock on an existing table) are held to its commit, which
	// follows its last statement. Defaults to false.
	Atomic bool
}

// create runs CreateMissing on x: when s is Atomic and x a DB, in one
// transaction.
func (s Schema) create(ctx context.Context, x Execer, objs []Object, skip func(string, error) bool) error {
	db, ok := x.(DB)
	if !s.Atomic || !ok {
		return CreateMissing(ctx, x, objs, s.Exists, skip)
	}
	return InTx(ctx, db, nil, func(tx Execer) error {
		return CreateMissing(ctx, savepoints{tx}, objs, s.Exists, skip)
	})
}

// savepoints runs each statement of x behind a savepoint, rolled back to when
// the statement fails: the transaction goes on (CreateMissing looks the
// object up again, or skips an index it may not make).
type savepoints struct{ x Execer }

func (s savepoints) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if _, err := s.x.ExecContext(ctx, `SAVEPOINT herald_create`); err != nil {
		return nil, err
	}
	res, err := s.x.ExecContext(ctx, q, args...)
	if err != nil {
		if _, e := s.x.ExecContext(ctx, `ROLLBACK TO SAVEPOINT herald_create`); e != nil {
			return nil, errors.Join(err, e)
		}
		return nil, err
	}
	_, err = s.x.ExecContext(ctx, `RELEASE SAVEPOINT herald_create`)
	return res, err
}

func (s savepoints) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return s.x.QueryContext(ctx, q, args...)
}

// CreateOutbox creates what the write path needs on the outbox t when missing.
func (s Schema) CreateOutbox(ctx context.Context, x Execer, t ident.Table) error {
	objs, err := OutboxObjects(s.FS, t, s.Quote)
	if err != nil {
		return err
	}
	return s.create(ctx, x, objs, nil)
}

// CheckOutbox checks what the write path needs on the outbox t (CheckSchema).
func (s Schema) CheckOutbox(ctx context.Context, x Execer, t ident.Table) error {
	objs, err := OutboxObjects(s.FS, t, s.Quote)
	if err != nil {
		return err
	}
	return CheckSchema(ctx, x, objs, s.Exists)
}

// CreateRelay creates the relay's additions to the outbox t that the mode
// needs when missing; an index whose creation fails is left out when skip
// says so.
func (s Schema) CreateRelay(ctx context.Context, x Execer, t ident.Table, ordered, retention bool, skip func(string, error) bool) error {
	objs, err := RelayObjects(s.FS, t, s.Quote, ordered, retention)
	if err != nil {
		return err
	}
	return s.create(ctx, x, objs, skip)
}

// CheckRelay checks what the relay uses: the outbox t itself (not the
// writers' tables derived from it, on which a relay role may have no
// privilege) and the relay's additions the mode needs.
func (s Schema) CheckRelay(ctx context.Context, x Execer, t ident.Table, ordered, retention bool) error {
	out, err := OutboxObjects(s.FS, t, s.Quote)
	if err != nil {
		return err
	}
	rel, err := RelayObjects(s.FS, t, s.Quote, ordered, retention)
	if err != nil {
		return err
	}
	objs := slices.DeleteFunc(out, func(o Object) bool { return o.Name != t })
	return CheckSchema(ctx, x, append(objs, rel...), s.Exists)
}

// CreateInbox creates the inbox t when missing.
func (s Schema) CreateInbox(ctx context.Context, x Execer, t ident.Table) error {
	objs, err := InboxObjects(s.FS, t, s.Quote)
	if err != nil {
		return err
	}
	return s.create(ctx, x, objs, nil)
}

// CheckInbox checks the inbox t.
func (s Schema) CheckInbox(ctx context.Context, x Execer, t ident.Table) error {
	objs, err := InboxObjects(s.FS, t, s.Quote)
	if err != nil {
		return err
	}
	return CheckSchema(ctx, x, objs, s.Exists)
}
