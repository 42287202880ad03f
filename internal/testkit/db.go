// Package testkit is what the tests of every package, and the conformance
// suite, share: a database of their own for each dialect (a PostgreSQL schema,
// an SQLite file, a MySQL database), dropped when the test ends, so tests run
// in parallel against the real servers and leave nothing behind; a quiet
// logger; waits; and the outbox rows as a test reads them.
package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/pgtest"
)

// Dialect is a database the tests run against.
type Dialect struct {
	// Name is the dialect: "postgres", "sqlite", "mysql".
	Name string
	// NewDSN makes a database of the test's own (dropped when it ends) and
	// returns the DSN that opens it.
	NewDSN func(t testing.TB) string
	// Open opens GORM on dsn; the connections close when the test ends.
	Open func(t testing.TB, dsn string, cfg *gorm.Config) *gorm.DB
}

// Postgres is the PostgreSQL on this machine (HERALD_TEST_DATABASE_URL), a
// schema per test.
var Postgres = Dialect{
	Name: "postgres",
	NewDSN: func(t testing.TB) string {
		_, dsn := pgtest.Schema(t)
		return dsn
	},
	Open: func(t testing.TB, dsn string, cfg *gorm.Config) *gorm.DB {
		return pgtest.OpenDSN(t, dsn, quietConfig(cfg))
	},
}

// SQLite is an SQLite file per test, in WAL mode, with write transactions that
// take the write lock at BEGIN and a 10 s busy timeout, as Herald asks.
var SQLite = Dialect{
	Name: "sqlite",
	NewDSN: func(t testing.TB) string {
		return SQLiteDSN(filepath.Join(t.TempDir(), "herald.db"))
	},
	Open: func(t testing.TB, dsn string, cfg *gorm.Config) *gorm.DB {
		t.Helper()
		db, err := OpenSQLite(dsn, quietConfig(cfg))
		if err != nil {
			t.Fatalf("testkit: open %s: %v", dsn, err)
		}
		closeAtCleanup(t, db)
		return db
	},
}

// SQLiteDSN is the DSN Herald's tests and examples open an SQLite file with:
// WAL (readers do not block the writer), BEGIN IMMEDIATE (a write transaction
// queues for the write lock when it begins, instead of failing later), a 10 s
// busy timeout, and foreign keys on.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)"
}

// OpenSQLite opens GORM on an SQLite DSN through the pure-Go driver.
func OpenSQLite(dsn string, cfg *gorm.Config) (*gorm.DB, error) {
	return gorm.Open(sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}), cfg)
}

// Dialects are the dialects the tests run against: all of them, or those named
// in HERALD_TEST_DIALECTS (comma-separated).
func Dialects() []Dialect {
	all := []Dialect{Postgres, SQLite, MySQL}
	want := os.Getenv("HERALD_TEST_DIALECTS")
	if want == "" {
		return all
	}
	var out []Dialect
	for _, d := range all {
		for w := range strings.SplitSeq(want, ",") {
			if strings.TrimSpace(w) == d.Name {
				out = append(out, d)
			}
		}
	}
	return out
}

// ForEach runs f as a parallel subtest per dialect.
func ForEach(t *testing.T, f func(t *testing.T, d Dialect)) {
	t.Helper()
	for _, d := range Dialects() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			f(t, d)
		})
	}
}

// OpenNew opens GORM on a new database of d's.
func (d Dialect) OpenNew(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	return d.Open(t, d.NewDSN(t), cfg)
}

func quietConfig(cfg *gorm.Config) *gorm.Config {
	if cfg == nil {
		cfg = &gorm.Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = logger.Discard
	}
	return cfg
}

func closeAtCleanup(t testing.TB, db *gorm.DB) {
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
}

// Quiet is a logger that drops everything, unless HERALD_TEST_LOG is set.
func Quiet() *slog.Logger {
	if os.Getenv("HERALD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Eventually polls cond until it holds, or fails the test after timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Row is an outbox row as a test reads it.
type Row struct {
	ID            uuid.UUID
	Type          string
	Version       int
	AggregateType string
	AggregateID   string
	Topic         string
	Payload       string
	Metadata      map[string]string
	Attempts      int
	Dead          bool
}

// Outbox reads the outbox table (default outbox_messages) in insertion order.
func Outbox(t testing.TB, db *gorm.DB, table ...string) []Row {
	t.Helper()
	name := "outbox_messages"
	if len(table) > 0 {
		name = table[0]
	}
	d, err := drivers.For(db)
	if err != nil {
		t.Fatal(err)
	}
	q := d.Quote(ident.MustTable(name))
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := sqlDB.QueryContext(context.Background(), `SELECT id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, attempts, dead_at IS NOT NULL FROM `+q+` ORDER BY seq`)
	if err != nil {
		t.Fatalf("testkit: read %s: %v", name, err)
	}
	defer func() { _ = rows.Close() }()
	var out []Row
	for rows.Next() {
		var (
			r       Row
			id, md  string
			payload []byte
		)
		if err := rows.Scan(&id, &r.Type, &r.Version, &r.AggregateType, &r.AggregateID, &r.Topic, &payload, &md, &r.Attempts, &r.Dead); err != nil {
			t.Fatalf("testkit: read %s: %v", name, err)
		}
		r.ID = uuid.MustParse(id)
		r.Payload = string(payload)
		if err := json.Unmarshal([]byte(md), &r.Metadata); err != nil {
			t.Fatalf("testkit: metadata %q: %v", md, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Count counts the rows of table (quoted for db's dialect).
func Count(t testing.TB, db *gorm.DB, table string) int64 {
	t.Helper()
	d, err := drivers.For(db)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	sqlDB, _ := db.DB()
	if err := sqlDB.QueryRowContext(context.Background(), `SELECT count(*) FROM `+d.Quote(ident.MustTable(table))).Scan(&n); err != nil {
		t.Fatalf("testkit: count %s: %v", table, err)
	}
	return n
}

// Must fails the test on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var _ = fmt.Sprint

// RefuseValue makes every INSERT into table of a row whose column is value
// fail, in the database's own way (a CHECK constraint, or a trigger where a
// constraint cannot be added to an existing table).
func RefuseValue(t testing.TB, db *gorm.DB, table, column, value string) {
	t.Helper()
	name := "refuse_" + column
	var err error
	switch db.Dialector.Name() {
	case "sqlite":
		err = db.Exec(`CREATE TRIGGER ` + name + ` BEFORE INSERT ON ` + ident.MustTable(table).Quoted() +
			` WHEN NEW.` + column + ` = '` + value + `' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`).Error
	default:
		d, derr := drivers.For(db)
		Must(t, derr)
		err = db.Exec(`ALTER TABLE ` + d.Quote(ident.MustTable(table)) + ` ADD CONSTRAINT ` + name +
			` CHECK (` + column + ` <> '` + value + `')`).Error
	}
	if err != nil {
		t.Fatalf("testkit: refuse %s.%s = %s: %v", table, column, value, err)
	}
}
