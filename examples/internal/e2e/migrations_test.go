package e2e

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/golang-migrate/migrate/v4"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/google/uuid"
	"github.com/pressly/goose/v3"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/inbox"
	storemigrate "github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// dialectFS is each database's migrations, as the migrations package exports
// them.
func dialectFS(name string) fs.FS {
	switch name {
	case "sqlite":
		return migrations.SQLite()
	case "mysql":
		return migrations.MySQL()
	}
	return migrations.Postgres()
}

// The migration files run with golang-migrate (up, down, up) and with goose
// (up, down, up) against each real database, and Herald then works on the
// tables they made, creating nothing itself (DisableAutoCreate).
func TestMigrationsWithTools(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		for _, tool := range []string{"golang-migrate", "goose"} {
			t.Run(tool, func(t *testing.T) {
				t.Parallel()
				dsn := d.NewDSN(t)
				if d.Name == "mysql" {
					dsn += "&multiStatements=true" // golang-migrate sends a file as one statement list
				}
				db := d.Open(t, dsn, nil)
				sqlDB, err := db.DB()
				testkit.Must(t, err)
				up, down := runTool(t, tool, d.Name, sqlDB, dialectFS(d.Name))
				up()
				down()
				if testkit.TableExists(t, db, "outbox_messages") {
					t.Fatal("down left the outbox table")
				}
				up()
				useTables(t, db)
			})
		}
	})
}

// The partitioned PostgreSQL set (retention by partition drop) runs with both
// tools too, and a relay dropping partitions works on what it made.
func TestPartitionedMigrationsWithTools(t *testing.T) {
	d := testkit.Postgres
	for _, tool := range []string{"golang-migrate", "goose"} {
		t.Run(tool, func(t *testing.T) {
			t.Parallel()
			db := d.Open(t, d.NewDSN(t), nil)
			sqlDB, err := db.DB()
			testkit.Must(t, err)
			up, down := runTool(t, tool, d.Name, sqlDB, migrations.PostgresPartitioned())
			up()
			down()
			if testkit.TableExists(t, db, "outbox_messages") {
				t.Fatal("down left the outbox table")
			}
			up()
			var partitioned bool
			testkit.Must(t, db.Raw(`SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = 'outbox_messages'::regclass)`).Scan(&partitioned).Error)
			if !partitioned {
				t.Fatal("the outbox is not partitioned")
			}
			useTables(t, db)
			// useTables wrote an event before any range existed: it sits in the
			// default partition, so the current range cannot be created until
			// it is cleaned (a warning); the next ranges are created ahead.
			r, err := relay.New(db, discard{}, relay.Config{Retention: time.Hour, DropPartitions: true, Logger: quietLogger()})
			testkit.Must(t, err)
			testkit.Must(t, r.Setup(context.Background()))
			if _, err := r.Cleanup(context.Background()); err != nil {
				t.Fatal(err)
			}
			var ranges int
			testkit.Must(t, db.Raw(`SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_messages'::regclass`).Scan(&ranges).Error)
			if ranges < 3 { // the default and at least the next two ranges
				t.Fatalf("%d partitions after Setup", ranges)
			}
		})
	}
}

// runTool returns functions that migrate sqlDB all the way up and down with
// tool.
func runTool(t *testing.T, tool, dialect string, sqlDB *sql.DB, fsys fs.FS) (up, down func()) {
	t.Helper()
	if tool == "goose" {
		gfs, err := migrations.Goose(fsys)
		testkit.Must(t, err)
		gd := map[string]goose.Dialect{"postgres": goose.DialectPostgres, "sqlite": goose.DialectSQLite3, "mysql": goose.DialectMySQL}[dialect]
		p, err := goose.NewProvider(gd, sqlDB, gfs)
		testkit.Must(t, err)
		return func() {
				_, err := p.Up(context.Background())
				testkit.Must(t, err)
			}, func() {
				_, err := p.DownTo(context.Background(), 0)
				testkit.Must(t, err)
			}
	}
	src, err := iofs.New(fsys, ".")
	testkit.Must(t, err)
	var m *migrate.Migrate
	switch dialect {
	case "postgres":
		drv, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{})
		testkit.Must(t, err)
		m, err = migrate.NewWithInstance("iofs", src, "pgx", drv)
		testkit.Must(t, err)
	case "sqlite":
		drv, err := migratesqlite.WithInstance(sqlDB, &migratesqlite.Config{})
		testkit.Must(t, err)
		m, err = migrate.NewWithInstance("iofs", src, "sqlite", drv)
		testkit.Must(t, err)
	case "mysql":
		drv, err := migratemysql.WithInstance(sqlDB, &migratemysql.Config{})
		testkit.Must(t, err)
		m, err = migrate.NewWithInstance("iofs", src, "mysql", drv)
		testkit.Must(t, err)
	}
	return func() {
			if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
				t.Fatal(err)
			}
		}, func() {
			if err := m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
				t.Fatal(err)
			}
		}
}

// useTables writes, relays (ordered, with retention: the relay's tables and
// indexes) and consumes on tables made by migrations, with Herald creating
// nothing.
func useTables(t *testing.T, db *gorm.DB) {
	t.Helper()
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{DisableAutoCreate: true})))
	testkit.Must(t, db.AutoMigrate(&Account{}))
	a := &Account{ID: newID()}
	a.Record(Deposited{AccountID: a.ID})
	testkit.Must(t, db.Create(a).Error)
	if n := testkit.Count(t, db, "outbox_messages"); n != 1 {
		t.Fatalf("%d events in the migrated outbox", n)
	}
	_, err := inbox.New(db, inbox.Config{DisableAutoCreate: true})
	testkit.Must(t, err)
	_, err = relay.New(db, discard{}, relay.Config{Ordered: true, Retention: 1})
	testkit.Must(t, err)
}

// Migrate applies every migration once and records the versions; the tables
// self-create when missing and defer to migrations when present.
func TestMigrate(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		db := d.OpenNew(t, nil)
		ctx := context.Background()
		migs, err := storemigrate.Migrations(dialectFS(d.Name))
		testkit.Must(t, err)
		done, err := migrations.Migrate(ctx, db)
		testkit.Must(t, err)
		if len(done) != len(migs) || len(done) < 4 {
			t.Fatalf("applied %v, want the %d migrations", done, len(migs))
		}
		again, err := migrations.Migrate(ctx, db)
		testkit.Must(t, err)
		if len(again) != 0 {
			t.Fatalf("applied %v again", again)
		}
		applied, err := migrations.Applied(ctx, db)
		testkit.Must(t, err)
		if len(applied) != len(migs) || applied[0] != 1 || applied[len(applied)-1] != migs[len(migs)-1].Version {
			t.Fatalf("recorded %v", applied)
		}
		useTables(t, db)
	})
}

// The up files carry goose's annotation and golang-migrate's names.
func TestMigrationFiles(t *testing.T) {
	for _, name := range []string{"postgres", "sqlite", "mysql"} {
		fsys := dialectFS(name)
		files, err := fs.Glob(fsys, "*.sql")
		testkit.Must(t, err)
		migs, err := storemigrate.Migrations(fsys) // refuses an up without its down
		testkit.Must(t, err)
		if len(migs) < 4 || len(files) != 2*len(migs) || migs[len(migs)-1].Version != int64(len(migs)) {
			t.Fatalf("%s: %d files, %d migrations: want up/down pairs numbered 1 to n", name, len(files), len(migs))
		}
		for _, f := range files {
			b, err := fs.ReadFile(fsys, f)
			testkit.Must(t, err)
			want := "-- +goose Up"
			if strings.HasSuffix(f, ".down.sql") {
				want = "-- +goose Down"
			}
			if !strings.HasPrefix(string(b), want) {
				t.Fatalf("%s/%s does not start with %q", name, f, want)
			}
		}
	}
}

func newID() uuid.UUID { return uuid.New() }

// discard is a publisher that drops what it is given.
type discard struct{}

func (discard) Publish(string, ...*message.Message) error { return nil }
func (discard) Close() error                              { return nil }
