// Package pgtest gives each test its own PostgreSQL schema on the local server, so
// tests run in parallel against the real database and leave nothing behind.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/internal/testkit/tb"
)

// DefaultDSN is the database tests use unless HERALD_TEST_DATABASE_URL or
// DATABASE_URL says otherwise.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DSN returns HERALD_TEST_DATABASE_URL, else DATABASE_URL, else DefaultDSN.
func DSN() string {
	for _, k := range []string{"HERALD_TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return DefaultDSN
}

var (
	adminOnce sync.Once
	admin     *sql.DB
	adminErr  error
)

// Admin returns a shared database/sql handle on DSN(), for set-up statements.
func Admin(t tb.TB) *sql.DB {
	t.Helper()
	adminOnce.Do(func() {
		admin, adminErr = sql.Open("pgx", DSN())
		if adminErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			adminErr = admin.PingContext(ctx)
		}
	})
	if adminErr != nil {
		t.Fatalf("pgtest: PostgreSQL at %s is not reachable: %v", DSN(), adminErr)
	}
	return admin
}

// Name returns a fresh identifier: prefix followed by random hex.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Schema creates a new schema, dropped with everything in it when the test ends,
// and returns its name and a DSN whose search_path is that schema.
func Schema(t tb.TB) (name, dsn string) {
	t.Helper()
	db := Admin(t)
	name = Name("herald_t_")
	if _, err := db.Exec(`CREATE SCHEMA ` + name); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec(`DROP SCHEMA ` + name + ` CASCADE`); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return name, WithSearchPath(DSN(), name)
}

// SchemaDB is Schema's database opened with database/sql (driver "pgx"),
// closed when the test ends, before the schema is dropped.
func SchemaDB(t tb.TB) *sql.DB {
	t.Helper()
	_, dsn := Schema(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("pgtest: open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// WithSearchPath returns dsn (a URL) with its search_path set to schema.
func WithSearchPath(dsn, schema string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic("pgtest: DSN is not a URL: " + err.Error())
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Open opens GORM on a new schema (see Schema). A nil cfg means a default config
// with a logger that prints only errors the test did not expect to see: none.
// The connections close when the test ends.
func Open(t tb.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	_, dsn := Schema(t)
	return OpenDSN(t, dsn, cfg)
}

// OpenDSN opens GORM on dsn and closes it when the test ends.
func OpenDSN(t tb.TB, dsn string, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	if cfg == nil {
		cfg = &gorm.Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = logger.Discard
	}
	db, err := gorm.Open(postgres.Open(dsn), cfg)
	if err != nil {
		t.Fatalf("pgtest: open %s: %v", dsn, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

var (
	scratchMu      sync.Mutex
	scratchSchemas []string
)

// ScratchDB opens GORM on a new schema for code that has no *testing.T, such as
// Example functions; Main drops those schemas when the tests end. It panics if
// PostgreSQL cannot be reached.
func ScratchDB() *gorm.DB {
	db, err := sql.Open("pgx", DSN())
	if err != nil {
		panic(err)
	}
	defer db.Close()
	name := Name("herald_x_")
	if _, err := db.Exec(`CREATE SCHEMA ` + name); err != nil {
		panic("pgtest: " + err.Error())
	}
	scratchMu.Lock()
	scratchSchemas = append(scratchSchemas, name)
	scratchMu.Unlock()
	g, err := gorm.Open(postgres.Open(WithSearchPath(DSN(), name)), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		panic("pgtest: " + err.Error())
	}
	return g
}

// Main runs the tests and drops the schemas ScratchDB made. Call it from TestMain.
func Main(m interface{ Run() int }) {
	code := m.Run()
	if len(scratchSchemas) > 0 {
		if db, err := sql.Open("pgx", DSN()); err == nil {
			for _, s := range scratchSchemas {
				_, _ = db.Exec(`DROP SCHEMA ` + s + ` CASCADE`)
			}
			_ = db.Close()
		}
	}
	os.Exit(code)
}

// WithHost returns dsn (a URL) pointing at host:port instead, and with an
// application_name, so that a test can find its connections in pg_stat_activity.
func WithHost(dsn, hostport, appName string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic("pgtest: DSN is not a URL: " + err.Error())
	}
	if hostport != "" {
		u.Host = hostport
	}
	if appName != "" {
		q := u.Query()
		q.Set("application_name", appName)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Terminate ends every backend whose application_name is appName and returns how
// many it ended.
func Terminate(t tb.TB, appName string) int {
	t.Helper()
	var n int
	err := Admin(t).QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, appName).Scan(&n)
	if err != nil {
		t.Fatalf("pgtest: terminate %s: %v", appName, err)
	}
	return n
}

// Setup opens GORM on a new schema (see Schema), registers plugin (when not
// nil) and migrates models. It returns the handle and the schema's DSN.
func Setup(t tb.TB, plugin gorm.Plugin, models ...any) (*gorm.DB, string) {
	t.Helper()
	_, dsn := Schema(t)
	db := OpenDSN(t, dsn, nil)
	if plugin != nil {
		if err := db.Use(plugin); err != nil {
			t.Fatalf("pgtest: use %s: %v", plugin.Name(), err)
		}
	}
	if err := db.AutoMigrate(models...); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return db, dsn
}

// OpenPool opens GORM on dsn for a program that runs without a *testing.T (the
// benchmarks, the chaos run): no logging, no ping at open (the database may be
// down yet), and a pool that keeps 64 idle connections, since database/sql's
// default of 2 would make concurrent callers reconnect on most statements.
func OpenPool(dsn string) (*gorm.DB, error) {
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
	if err != nil {
		return nil, err
	}
	s, err := db.DB()
	if err != nil {
		return nil, err
	}
	s.SetMaxIdleConns(64)
	return db, nil
}

// DropSchemaAtCleanup drops the schema name, with everything in it, when the
// test ends: for code under test that creates its own schema.
func DropSchemaAtCleanup(t tb.TB, name string) {
	t.Helper()
	db := Admin(t)
	t.Cleanup(func() { _, _ = db.Exec(`DROP SCHEMA IF EXISTS ` + name + ` CASCADE`) })
}
