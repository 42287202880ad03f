package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"sync"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
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
func Migrations(fsys fs.FS) ([]Migration, error) { return listMigrations(fsys) }

// listed is Migrations of a driver's set (Schema.FS), listed once per process
// when behind a pointer (fs.Sub of an embedded set; memfs.FS is not): a
// fleet's relay renders the migrations at each tenant's start. The caller
// does not change the list.
func listed(fsys fs.FS) ([]Migration, error) {
	if reflect.TypeOf(fsys).Kind() != reflect.Pointer {
		return listMigrations(fsys)
	}
	if ms, ok := listedFS.Load(fsys); ok {
		return ms.([]Migration), nil
	}
	ms, err := listMigrations(fsys)
	if err == nil {
		listedFS.Store(fsys, ms)
	}
	return ms, err
}

// listedFS are listed's lists, by file system.
var listedFS sync.Map // fs.FS -> []Migration

// listMigrations lists the migrations in fsys (Migrations).
func listMigrations(fsys fs.FS) ([]Migration, error) {
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

// Migrate applies the migrations of d not yet recorded in
// store.MigrationsTable (for the default table names), each in a transaction
// where the database allows DDL in one, and records each version. It returns
// the versions it applied.
//
// A statement that makes a table, an index or a column runs only when
// d.ObjectExists says it is missing, and a step with a check only when the
// check finds nothing (the statements that follow one run with it): so
// Migrate over tables Herald created itself (no version recorded) keeps them,
// makes what they lack, brings a table an earlier release made to today's
// shape, records every version, and leaves the schema Migrate alone makes.
func Migrate(ctx context.Context, db store.DB, d store.Driver) ([]int64, error) {
	return MigrateFS(ctx, db, d, d.Migrations())
}

// MigrateFS is Migrate with the migrations read from fsys (a set of d's: the
// partitioned PostgreSQL set, say). When d is a SchemaLocker, it runs holding
// the schema lock of the connection's database, on the connection the lock
// holds.
func MigrateFS(ctx context.Context, db store.DB, d store.Driver, fsys fs.FS) ([]int64, error) {
	migs, err := Migrations(fsys)
	if err != nil {
		return nil, err
	}
	var (
		lock Locker
		done []int64
	)
	if l, ok := d.(SchemaLocker); ok {
		lock = l.SchemaLock
	}
	err = locked(ctx, lock, db, ident.Table{}, func(x store.Execer) error {
		on, ok := x.(store.DB)
		if !ok {
			on = db
		}
		var e error
		done, e = migrateFS(ctx, on, d, fsys, migs)
		return e
	})
	return done, err
}

// SchemaLocker is a store.Driver whose creations, checks and migrations of
// a schema must not run beside each other (MySQL, whose DDL commits
// statement by statement): its Schema.Lock. Migrate holds it from start to
// end, so that Herald's own creation and checks at start wait for a
// migration instead of finding its tables half-made.
type SchemaLocker interface {
	// SchemaLock takes the lock of the database of t (Locker).
	SchemaLock(ctx context.Context, x store.Execer, t ident.Table) (store.Execer, func(), error)
}

// migrateFS applies migs on db (see MigrateFS).
func migrateFS(ctx context.Context, db store.DB, d store.Driver, fsys fs.FS, migs []Migration) ([]int64, error) {
	if _, err := db.ExecContext(ctx, d.MigrationsTableSQL()); err != nil {
		return nil, fmt.Errorf("create %s: %w", store.MigrationsTable, err)
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
		err = sqlkit.InTx(ctx, db, nil, func(tx store.Execer) error {
			for _, o := range objs {
				if o.Kind != store.KindStep || o.Check != "" {
					ok, err := d.ObjectExists(ctx, tx, o)
					if err != nil {
						return fmt.Errorf("look up %s: %w", describe(o), err)
					}
					if ok {
						// Made already (by Herald's own creation): what it
						// replaces may still be there, from an earlier
						// migration of this run.
						if err := dropReplaced(ctx, tx, d, o); err != nil {
							return err
						}
						continue
					}
				}
				if o.Kind == store.KindStep && len(o.Drops) > 0 { // an index dropped alone: not there on a table made without it
					if _, err := dropIfThere(ctx, tx, o, o.SQL, d.ObjectExists); err != nil {
						return err
					}
					continue
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

// dropReplaced runs the drops of the replacing index o (made already) whose
// index exists.
func dropReplaced(ctx context.Context, tx store.Execer, d store.Driver, o store.Object) error {
	if !o.Replaces {
		return nil
	}
	for _, q := range o.After {
		if !dropIndexRE.MatchString(q) {
			continue
		}
		if _, err := dropIfThere(ctx, tx, o, q, d.ObjectExists); err != nil {
			return err
		}
	}
	return nil
}

// AppliedVersions lists the versions recorded in store.MigrationsTable.
func AppliedVersions(ctx context.Context, db store.Execer) ([]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT version FROM `+store.MigrationsTable+` ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", store.MigrationsTable, err)
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
