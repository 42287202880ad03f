package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	storemigrate "github.com/heraldgo/herald/internal/store/migrate"
	sqlitestore "github.com/heraldgo/herald/internal/store/sqlite"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// upgrade names the migration that brings the tables of earlier releases to
// today's shape.
const upgrade = "0004_outbox_upgrade"

// legacyInsert writes an event as the code that made the legacy table did.
var legacyInsert = map[string]string{
	"postgres": `INSERT INTO outbox_messages (id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at)
VALUES ($1, 'account.deposited', 1, 'account', $2, 'account.deposited', '{}', '{}', now())`,
	"mysql": "INSERT INTO `outbox_messages` (id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, created_at, available_at)\n" +
		"VALUES (?, 'account.deposited', 1, 'account', ?, 'account.deposited', '{}', '{}', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
	"sqlite": `INSERT INTO "outbox_messages" (id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at)
VALUES (?, 'account.deposited', 1, 'account', ?, 'account.deposited', '{}', '{}', CAST(unixepoch('subsec') * 1000000 AS INTEGER))`,
}

// An outbox made by an earlier release (its DDL kept in testdata/legacy,
// with events written into it as that code did): the plugin, the relay's
// Setup and Run refuse it with ErrSchemaOutdated naming the migration to
// run; after Migrate the plugin writes, and the relay publishes the old
// events and the new one.
func TestUpgradeFromEarlierSchema(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		files, err := filepath.Glob(filepath.Join("testdata", "legacy", d.Name+"_*.sql"))
		testkit.Must(t, err)
		if len(files) == 0 {
			t.Fatal("no legacy schema")
		}
		for _, file := range files {
			t.Run(strings.TrimSuffix(filepath.Base(file), ".sql"), func(t *testing.T) {
				t.Parallel()
				upgradeFrom(t, d, file)
			})
		}
	})
}

func upgradeFrom(t *testing.T, d testkit.Dialect, file string) {
	ctx := context.Background()
	dsn := d.NewDSN(t)
	db := d.Open(t, dsn, nil)
	sqlDB, err := db.DB()
	testkit.Must(t, err)
	ddl, err := os.ReadFile(file)
	testkit.Must(t, err)
	for _, stmt := range strings.Split(string(ddl), ";\n") {
		if s := strings.TrimSpace(stmt); s != "" {
			if _, err := sqlDB.ExecContext(ctx, s); err != nil {
				t.Fatalf("legacy DDL: %v\n%s", err, s)
			}
		}
	}
	var old []string
	for i := range 3 {
		id := uuid.NewString()
		old = append(old, id)
		if _, err := sqlDB.ExecContext(ctx, legacyInsert[d.Name], id, fmt.Sprintf("acct-%d", i%2)); err != nil {
			t.Fatalf("legacy insert: %v", err)
		}
	}

	// The earlier table is refused, by name of the migration to run.
	// The relay checks the outbox table alone: MySQL's earlier outbox had
	// the columns 0004 brings (only the writers' lock rows are missing), so
	// its relay names the first migration its columns lack.
	relayUpgrade := upgrade
	if d.Name == "mysql" {
		relayUpgrade = "0007_schedule"
	}
	outdatedBy := func(what, migration string, err error) {
		t.Helper()
		if !errors.Is(err, outboxhook.ErrSchemaOutdated) || !errors.Is(err, relay.ErrSchemaOutdated) || !strings.Contains(err.Error(), migration) {
			t.Fatalf("%s on the earlier table: %v, want ErrSchemaOutdated naming %s", what, err, migration)
		}
	}
	outdated := func(what string, err error) {
		t.Helper()
		outdatedBy(what, upgrade, err)
	}
	outdated("db.Use", db.Use(outboxhook.New(outboxhook.Config{})))
	outdated("db.Use (DisableAutoCreate)", d.Open(t, dsn, nil).Use(outboxhook.New(outboxhook.Config{DisableAutoCreate: true})))
	cfg := relay.Config{Ordered: true, Partitions: 4, PollInterval: 20 * time.Millisecond, Logger: testkit.Quiet()}
	r, err := relay.New(db, testkit.MustNotPublish{}, cfg)
	testkit.Must(t, err)
	outdatedBy("relay Setup", relayUpgrade, r.Setup(ctx))
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	outdatedBy("relay Run", relayUpgrade, r.Run(runCtx))

	if _, err := migrations.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate over the earlier table: %v", err)
	}
	if d.Name == "sqlite" { // part_key computed for the rows there, as Herald computes it
		for _, id := range old {
			var aggType, aggID string
			var key int64
			testkit.Must(t, sqlDB.QueryRowContext(ctx, `SELECT aggregate_type, aggregate_id, part_key FROM outbox_messages WHERE id = ?`, id).
				Scan(&aggType, &aggID, &key))
			if want := sqlitestore.PartKey(id, aggType, aggID); key != want {
				t.Fatalf("event %s: part_key %d after Migrate, want %d", id, key, want)
			}
		}
	}

	// Everything works: a write through the plugin (an aggregate's: it
	// takes the aggregate's lock), and the relay publishes old and new.
	db = d.Open(t, dsn, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{})))
	testkit.Must(t, db.AutoMigrate(&testkit.Account{}))
	a := &testkit.Account{ID: uuid.New()}
	a.Record(testkit.Deposited{AccountID: a.ID})
	testkit.Must(t, db.Transaction(func(tx *gorm.DB) error {
		return outboxhook.Add(tx.Model(a), testkit.Deposited{AccountID: a.ID, Seq: 1})
	}))
	testkit.Must(t, db.Create(a).Error)
	want := testkit.Count(t, db, "outbox_messages")
	if want != 5 {
		t.Fatalf("%d events in the outbox, want 3 old and 2 new", want)
	}
	var mu sync.Mutex
	got := map[string]bool{}
	pub := testkit.PublisherFunc(func(_ string, msgs ...*message.Message) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			got[m.UUID] = true
		}
		return nil
	})
	r, err = relay.New(db, pub, cfg)
	testkit.Must(t, err)
	testkit.Must(t, r.Setup(ctx))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	testkit.Eventually(t, time.Minute, "every event published", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return int64(len(got)) == want
	})
	stop()
	testkit.Must(t, <-done)
	for _, id := range old {
		if !got[id] {
			t.Fatalf("old event %s not published", id)
		}
	}
	if n := testkit.Pending(t, db); n != 0 {
		t.Fatalf("%d events pending after the relay published them all", n)
	}
}

// mode is a way of running Herald that self-creates a different set of
// objects.
type mode struct {
	name  string
	relay relay.Config
}

func modes(d testkit.Dialect) []mode {
	out := []mode{
		{name: "unordered", relay: relay.Config{}},
		{name: "ordered", relay: relay.Config{Ordered: true}},
		{name: "retention", relay: relay.Config{Retention: time.Hour}},
		{name: "ordered_retention", relay: relay.Config{Ordered: true, Retention: time.Hour}},
	}
	if d.Name == "postgres" {
		out = append(out, mode{name: "partitioned", relay: relay.Config{Retention: time.Hour, DropPartitions: true}})
	}
	return out
}

// selfCreate makes what Herald makes itself in mode m: the relay's Setup
// (first, so that DropPartitions gets its partitioned outbox), the plugin,
// the inbox.
func selfCreate(t *testing.T, d testkit.Dialect, dsn string, m mode) {
	t.Helper()
	db := d.Open(t, dsn, nil)
	cfg := m.relay
	cfg.Logger = testkit.Quiet()
	r, err := relay.New(db, testkit.MustNotPublish{}, cfg)
	testkit.Must(t, err)
	if err := r.Setup(context.Background()); err != nil {
		t.Fatalf("relay Setup: %v", err)
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		t.Fatalf("db.Use: %v", err)
	}
	if _, err := inbox.New(db, inbox.Config{}); err != nil {
		t.Fatalf("inbox.New: %v", err)
	}
}

// migrate runs Migrate, with the partitioned set in the partitioned mode.
func migrate(t *testing.T, d testkit.Dialect, dsn string, m mode) {
	t.Helper()
	db := d.Open(t, dsn, nil)
	var err error
	if m.relay.DropPartitions {
		_, err = migrations.MigrateFS(context.Background(), db, migrations.PostgresPartitioned())
	} else {
		_, err = migrations.Migrate(context.Background(), db)
	}
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
}

// Migrate after self-creation succeeds and leaves the schema Migrate alone
// makes; self-creation after Migrate changes nothing; in every mode.
func TestMigrateAndSelfCreationAgree(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		for _, m := range modes(d) {
			t.Run(m.name, func(t *testing.T) {
				t.Parallel()
				// Migrate alone.
				alone := d.NewDSN(t)
				migrate(t, d, alone, m)
				want := schemaOf(t, d, alone)

				// Self-creation, then Migrate.
				self := d.NewDSN(t)
				selfCreate(t, d, self, m)
				migrate(t, d, self, m)
				if got := schemaOf(t, d, self); !slices.Equal(got, want) {
					t.Fatalf("Migrate after self-creation:\n%s", diff(got, want))
				}

				// Self-creation after Migrate.
				selfCreate(t, d, alone, m)
				if got := schemaOf(t, d, alone); !slices.Equal(got, want) {
					t.Fatalf("self-creation after Migrate changed the schema:\n%s", diff(got, want))
				}
				adb := d.Open(t, alone, nil)
				applied, err := migrations.Applied(context.Background(), adb)
				testkit.Must(t, err)
				fsys, err := migrations.For(adb)
				testkit.Must(t, err)
				migs, err := storemigrate.Migrations(fsys)
				testkit.Must(t, err)
				if len(applied) != len(migs) {
					t.Fatalf("recorded %v", applied)
				}
			})
		}
	})
}

// rangePartition matches the names of the range partitions the relay makes
// (and their indexes): they depend on the day, not on the migrations.
var rangePartition = regexp.MustCompile(`_p\d{8}t\d{6}`)

// schemaOf describes the tables, columns and indexes of dsn's database (and
// how many aggregate lock rows MySQL's has), sorted, without the migrations
// table and the range partitions.
func schemaOf(t *testing.T, d testkit.Dialect, dsn string) []string {
	t.Helper()
	db := d.Open(t, dsn, nil)
	sqlDB, err := db.DB()
	testkit.Must(t, err)
	var q, schema string
	switch d.Name {
	case "postgres":
		testkit.Must(t, sqlDB.QueryRow(`SELECT current_schema()`).Scan(&schema))
		q = `SELECT 'table ' || relname || ' ' || relkind::text FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p')
UNION ALL SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
  FROM information_schema.columns WHERE table_schema = current_schema()
UNION ALL SELECT 'index ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = current_schema()`
	case "mysql":
		q = "SELECT concat('column ', table_name, '.', column_name, ' ', column_type, ' ', is_nullable, ' ', coalesce(column_default, 'NULL'))\n" +
			"  FROM information_schema.columns WHERE table_schema = DATABASE()\n" +
			"UNION ALL SELECT concat('index ', table_name, '.', index_name, ' ', seq_in_index, ' ', column_name, ' ', non_unique)\n" +
			"  FROM information_schema.statistics WHERE table_schema = DATABASE()\n" +
			"UNION ALL SELECT concat('lock rows ', count(*)) FROM `outbox_messages_locks`"
	default:
		q = `SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'`
	}
	rows, err := sqlDB.Query(q)
	testkit.Must(t, err)
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var s sql.NullString
		testkit.Must(t, rows.Scan(&s))
		line := s.String
		if schema != "" {
			line = strings.ReplaceAll(strings.ReplaceAll(line, `"`+schema+`".`, ""), schema+".", "")
		}
		if strings.Contains(line, store.MigrationsTable) || rangePartition.MatchString(line) {
			continue
		}
		out = append(out, line)
	}
	testkit.Must(t, rows.Err())
	slices.Sort(out)
	return out
}

// diff lists the lines only one of got and want has.
func diff(got, want []string) string {
	var b strings.Builder
	for _, g := range got {
		if !slices.Contains(want, g) {
			b.WriteString("  extra:   " + g + "\n")
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			b.WriteString("  missing: " + w + "\n")
		}
	}
	return b.String()
}

// withLater is fsys with two migrations added after the last, as later
// releases add them: a column on the relay's lease table and a table of the
// writers'.
func withLater(t *testing.T, d testkit.Dialect, fsys fs.FS) (fs.FS, string, string) {
	t.Helper()
	migs, err := storemigrate.Migrations(fsys)
	testkit.Must(t, err)
	q := func(s string) string { return `"` + s + `"` }
	if d.Name == "mysql" {
		q = func(s string) string { return "`" + s + "`" }
	}
	out := fstest.MapFS{}
	names, err := fs.Glob(fsys, "*.sql")
	testkit.Must(t, err)
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		testkit.Must(t, err)
		out[n] = &fstest.MapFile{Data: b}
	}
	next := migs[len(migs)-1].Version + 1
	col := fmt.Sprintf("%04d_lease_note", next)
	tbl := fmt.Sprintf("%04d_things", next+1)
	out[col+".up.sql"] = &fstest.MapFile{Data: []byte("-- +goose Up\nALTER TABLE " + q("outbox_messages_leases") + " ADD COLUMN note BIGINT NOT NULL DEFAULT 0;\n")}
	out[col+".down.sql"] = &fstest.MapFile{Data: []byte("-- +goose Down\nALTER TABLE " + q("outbox_messages_leases") + " DROP COLUMN note;\n")}
	out[tbl+".up.sql"] = &fstest.MapFile{Data: []byte("-- +goose Up\nCREATE TABLE IF NOT EXISTS " + q("outbox_messages_things") + " (k BIGINT NOT NULL PRIMARY KEY);\n" +
		"CREATE INDEX " + q("outbox_messages_things_k_idx") + " ON " + q("outbox_messages_things") + " (k);\n")}
	out[tbl+".down.sql"] = &fstest.MapFile{Data: []byte("-- +goose Down\nDROP TABLE " + q("outbox_messages_things") + ";\n")}
	return out, col, tbl
}

// A migration added later is created by Herald, checked at start and applied
// by Migrate with no code change: one definition, the files.
func TestLaterMigrationIsPickedUp(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		ctx := context.Background()
		drv, err := drivers.ByName(d.Name)
		testkit.Must(t, err)
		later, col, tbl := withLater(t, d, drv.Migrations())
		now := storemigrate.Schema{FS: drv.Migrations(), Quote: drv.Quote, Exists: drv.ObjectExists, ExistsAll: drv.ObjectsExist}
		next := storemigrate.Schema{FS: later, Quote: drv.Quote, Exists: drv.ObjectExists, ExistsAll: drv.ObjectsExist}
		outbox := ident.MustTable("outbox_messages")
		open := func() *sql.DB {
			sqlDB, err := d.OpenNew(t, nil).DB()
			testkit.Must(t, err)
			return sqlDB
		}

		// Self-creation by the later code makes the later objects.
		fresh := open()
		testkit.Must(t, next.CreateOutbox(ctx, fresh, outbox))
		testkit.Must(t, next.CreateRelay(ctx, fresh, outbox, store.RelayCreateParams{Ordered: true, Retention: true}))
		testkit.Must(t, next.CheckOutbox(ctx, fresh, outbox))
		testkit.Must(t, next.CheckRelay(ctx, fresh, outbox, store.RelayCheckParams{Ordered: true, Retention: true}))

		// Tables today's code made are outdated for the later code, by name
		// of the migration; Migrate brings them up to date.
		old := open()
		testkit.Must(t, now.CreateOutbox(ctx, old, outbox))
		testkit.Must(t, now.CreateRelay(ctx, old, outbox, store.RelayCreateParams{Ordered: true, Retention: true}))
		testkit.Must(t, next.CreateOutbox(ctx, old, outbox)) // makes the missing table, alters nothing
		if err := next.CheckRelay(ctx, old, outbox, store.RelayCheckParams{Ordered: true, Retention: true}); !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), col) {
			t.Fatalf("relay check of today's tables: %v, want ErrSchemaOutdated naming %s", err, col)
		}
		if err := next.CheckRelay(ctx, old, outbox, store.RelayCheckParams{Retention: true}); err != nil {
			t.Fatalf("unordered relay check (no lease table needed): %v", err)
		}
		oldDB := open()
		testkit.Must(t, now.CreateOutbox(ctx, oldDB, outbox))
		if err := next.CheckOutbox(ctx, oldDB, outbox); !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), tbl) {
			t.Fatalf("outbox check of today's tables: %v, want ErrSchemaOutdated naming %s", err, tbl)
		}
		for _, db := range []*sql.DB{old, oldDB} {
			if _, err := storemigrate.MigrateFS(ctx, db, drv, later); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			testkit.Must(t, next.CheckOutbox(ctx, db, outbox))
			testkit.Must(t, next.CheckRelay(ctx, db, outbox, store.RelayCheckParams{Ordered: true, Retention: true}))
		}
	})
}

// The catalog read in one statement (ObjectsExist, what a creation or check
// looks up through) answers as the lookups one by one (ObjectExists) for every
// object of every migration: with nothing made, the outbox alone, all of it,
// and all of it with a later migration's objects still missing.
func TestObjectsExistAgrees(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		ctx := context.Background()
		drv, err := drivers.ByName(d.Name)
		testkit.Must(t, err)
		later, _, _ := withLater(t, d, drv.Migrations())
		outbox := ident.MustTable("outbox_messages")
		objs, err := storemigrate.SchemaObjects(later, "outbox_messages", outbox, drv.Quote)
		testkit.Must(t, err)
		objs = slices.DeleteFunc(objs, func(o store.Object) bool { return o.Kind == store.KindStep })
		sqlDB, err := d.OpenNew(t, nil).DB()
		testkit.Must(t, err)
		s := storemigrate.Schema{FS: drv.Migrations(), Quote: drv.Quote, Exists: drv.ObjectExists}
		agree := func(stage string, wantSome, wantAll bool) {
			t.Helper()
			all, err := drv.ObjectsExist(ctx, sqlDB, objs)
			testkit.Must(t, err)
			some, every := false, true
			for i, o := range objs {
				one, err := drv.ObjectExists(ctx, sqlDB, o)
				testkit.Must(t, err)
				if all[i] != one {
					t.Fatalf("%s: %v %s %s %s: ObjectsExist %v, ObjectExists %v", stage, o.Kind, o.Name, o.On, o.Column, all[i], one)
				}
				some = some || one
				every = every && one
			}
			if some != wantSome || every != wantAll {
				t.Fatalf("%s: some %v, all %v of %d objects exist", stage, some, every, len(objs))
			}
		}
		agree("nothing made", false, false)
		testkit.Must(t, s.CreateOutbox(ctx, sqlDB, outbox))
		agree("the outbox", true, false)
		testkit.Must(t, s.CreateRelay(ctx, sqlDB, outbox, store.RelayCreateParams{Ordered: true, Retention: true}))
		testkit.Must(t, s.CreateInbox(ctx, sqlDB, ident.MustTable("inbox_messages")))
		agree("today's schema", true, false) // the later migration's objects are missing
		if _, err := storemigrate.MigrateFS(ctx, sqlDB, drv, later); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		agree("migrated", true, true)
	})
}

// The migrations are listed per database without a connection (List,
// ForDatabase, Databases): one version sequence from 1, the first ones the
// same on every database; Status reads which are applied, none before
// Migrate (no version table), all after.
func TestListAndStatus(t *testing.T) {
	sets := map[string][]migrations.Migration{}
	for _, name := range migrations.Databases() {
		fsys, err := migrations.ForDatabase(name)
		testkit.Must(t, err)
		migs, err := migrations.List(fsys)
		testkit.Must(t, err)
		if len(migs) < 5 {
			t.Fatalf("%s: %d migrations", name, len(migs))
		}
		for i, m := range migs {
			if m.Version != int64(i+1) || m.Up != m.String()+".up.sql" || m.Down != m.String()+".down.sql" {
				t.Fatalf("%s: migration %d is %+v", name, i, m)
			}
		}
		if first := sets["postgres"]; first != nil && !slices.Equal(migs[:5], first[:5]) {
			t.Fatalf("%s lists %v, postgres %v", name, migs, first)
		}
		sets[name] = migs
	}
	want := sets["postgres"]
	if _, err := migrations.ForDatabase("oracle"); err == nil {
		t.Fatal("ForDatabase(oracle) = nil error")
	}
	if want[0].String() != "0001_"+migrations.DefaultOutboxTable {
		t.Fatalf("first migration %s", want[0])
	}
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		want := sets[d.Name]
		db := d.Open(t, d.NewDSN(t), nil)
		states, err := migrations.Status(context.Background(), db)
		testkit.Must(t, err)
		if len(states) != len(want) {
			t.Fatalf("Status: %d migrations, want %d", len(states), len(want))
		}
		for i, s := range states {
			if s.Migration != want[i] || s.Applied {
				t.Fatalf("fresh database: %+v", s)
			}
		}
		_, err = migrations.Migrate(context.Background(), db)
		testkit.Must(t, err)
		states, err = migrations.Status(context.Background(), db)
		testkit.Must(t, err)
		for _, s := range states {
			if !s.Applied {
				t.Fatalf("after Migrate: %+v", s)
			}
		}
	})
}
