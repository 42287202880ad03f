// Package testkit is what the tests of every package, and the conformance
// suite, share: a database of their own for each dialect (a PostgreSQL schema,
// an SQLite file, a MySQL database), dropped when the test ends, so tests run
// in parallel against the real servers and leave nothing behind; a quiet
// logger; waits; the outbox rows as a test reads them (and breaks them); and
// fake publishers and what a subscriber received (publishers.go).
package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/pgtest"
	sqlitestore "github.com/heraldgo/herald/internal/store/sqlite"
	"github.com/heraldgo/herald/internal/testkit/tb"
	"github.com/heraldgo/herald/internal/testkit/testsql"
)

// Dialect is a database the tests run against.
type Dialect struct {
	// Name is the dialect: "postgres", "sqlite", "mysql".
	Name string
	// NewDSN makes a database of the test's own (dropped when it ends) and
	// returns the DSN that opens it.
	NewDSN func(t tb.TB) string
	// Open opens GORM on dsn; the connections close when the test ends.
	Open func(t tb.TB, dsn string, cfg *gorm.Config) *gorm.DB
	// Dial opens GORM on dsn, quiet, without a test: for code that opens
	// and closes pools itself (a fleet's tenants); the caller closes it.
	Dial func(dsn string) (*gorm.DB, error)
	// SQL is what the tests need to know of the database beyond what Herald
	// sends (reading and moving a row's clock, breaking rows, ...).
	SQL testsql.SQL
}

// Postgres is the PostgreSQL on this machine (HERALD_TEST_DATABASE_URL), a
// schema per test.
var Postgres = Dialect{
	Name: "postgres",
	NewDSN: func(t tb.TB) string {
		_, dsn := pgtest.Schema(t)
		return dsn
	},
	Open: func(t tb.TB, dsn string, cfg *gorm.Config) *gorm.DB {
		return pgtest.OpenDSN(t, dsn, quietConfig(cfg))
	},
	Dial: func(dsn string) (*gorm.DB, error) { return gorm.Open(postgres.Open(dsn), quietConfig(nil)) },
	SQL:  testsql.Postgres{},
}

// SQLite is an SQLite file per test, in WAL mode, with write transactions that
// take the write lock at BEGIN and a 10 s busy timeout, as Herald asks.
var SQLite = Dialect{
	Name: "sqlite",
	NewDSN: func(t tb.TB) string {
		return SQLiteDSN(filepath.Join(t.TempDir(), "herald.db"))
	},
	Open: func(t tb.TB, dsn string, cfg *gorm.Config) *gorm.DB {
		t.Helper()
		db, err := OpenSQLite(dsn, quietConfig(cfg))
		if err != nil {
			t.Fatalf("testkit: open %s: %v", dsn, err)
		}
		closeAtCleanup(t, db)
		return db
	},
	Dial: func(dsn string) (*gorm.DB, error) { return OpenSQLite(dsn, quietConfig(nil)) },
	SQL:  testsql.SQLite{},
}

// SQLiteDSN is the DSN Herald's tests and examples open an SQLite file with:
// Herald's recommended one (internal/store/sqlite's DSN: WAL, BEGIN
// IMMEDIATE, a 10 s busy timeout), with foreign keys on and
// synchronous=NORMAL (a test need not survive a power cut).
func SQLiteDSN(path string) string {
	return sqlitestore.DSN(path) + "&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)"
}

// OpenSQLite opens GORM on an SQLite DSN through the pure-Go driver.
func OpenSQLite(dsn string, cfg *gorm.Config) (*gorm.DB, error) {
	return gorm.Open(sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}), cfg)
}

// known are the dialects testkit knows.
func known() []Dialect { return []Dialect{Postgres, SQLite, MySQL} }

// Dialects are the dialects the tests run against: all of them, or those named
// in HERALD_TEST_DIALECTS (comma-separated).
func Dialects() []Dialect {
	all := known()
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

// Long reports whether the long tests run (HERALD_LONG_TESTS set, as CI
// sets it): the stress tests at full size, and the conformance suite whole on
// every database rather than each test on one of them.
func Long() bool { return os.Getenv("HERALD_LONG_TESTS") != "" }

// ForEach runs f as a parallel subtest per dialect. A test passes its
// *testing.T and a func(t *testing.T, d Dialect) (see tb.T).
func ForEach[T tb.T[T]](t T, f func(t T, d Dialect)) {
	t.Helper()
	for _, d := range Dialects() {
		t.Run(d.Name, func(t T) {
			t.Parallel()
			f(t, d)
		})
	}
}

// Of returns the dialect of db, a handle opened on a database of one of
// testkit's dialects: the one whose SQL the helpers that take only the
// handle use.
func Of(db *gorm.DB) (Dialect, error) {
	if db == nil || db.Dialector == nil {
		return Dialect{}, fmt.Errorf("testkit: no dialector")
	}
	for _, d := range known() {
		if d.Name == db.Dialector.Name() {
			return d, nil
		}
	}
	return Dialect{}, fmt.Errorf("testkit: no dialect %q", db.Dialector.Name())
}

// OpenNew opens GORM on a new database of d's.
func (d Dialect) OpenNew(t tb.TB, cfg *gorm.Config) *gorm.DB {
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

func closeAtCleanup(t tb.TB, db *gorm.DB) {
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
func Eventually(t tb.TB, timeout time.Duration, what string, cond func() bool) {
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
	Strikes       int
	LastError     string
	Processed     bool // processed_at set (published, kept for the retention)
	Dead          bool
}

// Pending reports whether the row waits to be published (neither processed
// nor dead).
func (r Row) Pending() bool { return !r.Processed && !r.Dead }

// Outbox reads the outbox table (default outbox_messages) in insertion order.
func Outbox(t tb.TB, db *gorm.DB, table ...string) []Row {
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
	rows, err := sqlDB.QueryContext(context.Background(), `SELECT id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, attempts, strikes,
  coalesce(last_error, ''), processed_at IS NOT NULL, dead_at IS NOT NULL FROM `+q+` ORDER BY seq`)
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
		if err := rows.Scan(&id, &r.Type, &r.Version, &r.AggregateType, &r.AggregateID, &r.Topic, &payload, &md, &r.Attempts, &r.Strikes,
			&r.LastError, &r.Processed, &r.Dead); err != nil {
			t.Fatalf("testkit: read %s: %v", name, err)
		}
		r.ID, _ = uuid.Parse(id) // uuid.Nil for a row a test gave a bad id (SetOutboxColumn)
		r.Payload = string(payload)
		if err := json.Unmarshal([]byte(md), &r.Metadata); err != nil {
			r.Metadata = nil // not a string map: a row a test broke (SetOutboxColumn)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Pending counts the outbox rows (default table outbox_messages) waiting to
// be published: neither processed nor dead.
func Pending(t tb.TB, db *gorm.DB, table ...string) int64 {
	t.Helper()
	name := "outbox_messages"
	if len(table) > 0 {
		name = table[0]
	}
	d, err := drivers.For(db)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	sqlDB, _ := db.DB()
	if err := sqlDB.QueryRowContext(context.Background(), `SELECT count(*) FROM `+d.Quote(ident.MustTable(name))+
		` WHERE processed_at IS NULL AND dead_at IS NULL`).Scan(&n); err != nil {
		t.Fatalf("testkit: count pending in %s: %v", name, err)
	}
	return n
}

// SetOutboxColumn stores value in column of the outbox_messages row id as it
// is, past every check of Herald's: for rows Herald would never write (metadata
// that is JSON but no string map, an id that is no UUID). On PostgreSQL the
// text is cast to the column's type (jsonb, uuid), which may refuse it: the
// database's error is returned.
func SetOutboxColumn(db *gorm.DB, id uuid.UUID, column, value string) error {
	d, err := drivers.For(db)
	if err != nil {
		return err
	}
	if _, err := ident.ParseName(column); err != nil {
		return err
	}
	dl, err := Of(db)
	if err != nil {
		return err
	}
	set := dl.SQL.SetText(column)
	return db.Exec(`UPDATE `+d.Quote(ident.MustTable("outbox_messages"))+` SET `+set+` WHERE id = ?`, value, id.String()).Error
}

// Waits returns, for each pending outbox_messages row, how long until it is
// due (available_at, by the database's clock; negative when due).
func Waits(t tb.TB, db *gorm.DB) map[uuid.UUID]time.Duration {
	t.Helper()
	d, err := drivers.For(db)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := Of(db)
	if err != nil {
		t.Fatal(err)
	}
	wait := dl.SQL.MicrosUntil("available_at")
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := sqlDB.QueryContext(context.Background(), `SELECT id, `+wait+` FROM `+d.Quote(ident.MustTable("outbox_messages"))+
		` WHERE processed_at IS NULL AND dead_at IS NULL`)
	if err != nil {
		t.Fatalf("testkit: waits: %v", err)
	}
	defer func() { _ = rows.Close() }()
	out := map[uuid.UUID]time.Duration{}
	for rows.Next() {
		var (
			id string
			us int64
		)
		if err := rows.Scan(&id, &us); err != nil {
			t.Fatalf("testkit: waits: %v", err)
		}
		u, _ := uuid.Parse(id)
		out[u] = time.Duration(us) * time.Microsecond
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Leases returns the owner of each ordering partition of the outbox_messages
// relays ("" for none), or nil while the lease table does not exist.
func Leases(db *gorm.DB) map[int]string {
	d, err := drivers.For(db)
	if err != nil {
		return nil
	}
	dl, err := Of(db)
	if err != nil {
		return nil
	}
	part := dl.SQL.Column("partition")
	sqlDB, err := db.DB()
	if err != nil {
		return nil
	}
	rows, err := sqlDB.QueryContext(context.Background(), `SELECT `+part+`, owner FROM `+d.Quote(ident.MustTable("outbox_messages_leases")))
	if err != nil {
		return nil
	}
	defer func() { _ = rows.Close() }()
	out := map[int]string{}
	for rows.Next() {
		var (
			p     int
			owner string
		)
		if rows.Scan(&p, &owner) != nil {
			return nil
		}
		out[p] = owner
	}
	return out
}

// Count counts the rows of table (quoted for db's dialect).
func Count(t tb.TB, db *gorm.DB, table string) int64 {
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
func Must(t tb.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// RefuseValue makes every INSERT into table of a row whose column is value,
// and every UPDATE that sets it, fail, in the database's own way (a CHECK
// constraint, or triggers where a constraint cannot be added to an existing
// table: the dialect's SQL).
func RefuseValue(t tb.TB, db *gorm.DB, table, column, value string) {
	t.Helper()
	d, err := Of(db)
	Must(t, err)
	for _, q := range d.SQL.Refuse(ident.MustTable(table), column, value) {
		if err == nil {
			err = db.Exec(q).Error
		}
	}
	if err != nil {
		t.Fatalf("testkit: refuse %s.%s = %s: %v", table, column, value, err)
	}
}
