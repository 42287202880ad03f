// Package logicaltest gives tests a PostgreSQL server at wal_level=logical,
// which the shared server (wal_level=replica) is not: one private server per
// test package, started at the first test that asks for it (pgtest's
// StartServer: a spare port, a temporary directory, run as the system user
// postgres when the tests run as root) and stopped by Main when the package's
// tests end (pg_ctl stop -m fast on its own data directory). Each test gets a
// database of its own, dropped with its replication slots when it ends.
//
//	func TestMain(m *testing.M) { logicaltest.Main(m) }
//
// A test is skipped when the server cannot be run here (no initdb or pg_ctl,
// see pgtest.ErrNoBinaries).
package logicaltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

// Settings are the server's settings beyond pgtest's: logical decoding, and
// room for a slot and a walsender per test of a package run in parallel.
var Settings = []string{
	"wal_level=logical",
	"max_replication_slots=32",
	"max_wal_senders=32",
	"max_connections=100",
}

var (
	mainCalled bool
	once       sync.Once
	server     *pgtest.PrivateServer
	admin      *sql.DB
	startErr   error
)

// Main runs the package's tests and then stops the server, if one was
// started. Call it from TestMain.
func Main(m interface{ Run() int }) { os.Exit(Wrap(m).Run()) }

// Wrap returns m whose Run also stops the server when the tests end, for a
// TestMain that has another Main to call (pgtest.Main(logicaltest.Wrap(m))).
func Wrap(m interface{ Run() int }) interface{ Run() int } {
	mainCalled = true
	return wrapped{m}
}

type wrapped struct{ m interface{ Run() int } }

func (w wrapped) Run() int {
	code := w.m.Run()
	if server != nil {
		_ = admin.Close()
		if err := server.Stop("fast"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

func start() {
	server, startErr = pgtest.StartServer(Settings...)
	if startErr != nil {
		return
	}
	admin, startErr = sql.Open("pgx", server.DSN)
}

// DSN creates a database for the test on the package's server (starting it
// at the first call) and returns its URL (user postgres, a superuser). The
// database and its replication slots are dropped when the test ends.
func DSN(t tb.TB) string {
	t.Helper()
	if !mainCalled {
		t.Fatal("logicaltest: call logicaltest.Main(m) (or Wrap) from TestMain, which stops the server")
	}
	once.Do(start)
	if errors.Is(startErr, pgtest.ErrNoBinaries) {
		t.Skip(startErr)
	}
	if startErr != nil {
		t.Fatalf("logicaltest: %v", startErr)
	}
	name := pgtest.Name("herald_l_")
	if _, err := admin.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatalf("logicaltest: create database: %v", err)
	}
	t.Cleanup(func() { drop(t, name) })
	u, err := url.Parse(server.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// drop drops the database and, first, its slots (a database with a slot
// cannot be dropped), ending the walsenders that still stream them.
func drop(t tb.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 50 {
		_, _ = admin.ExecContext(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
WHERE database = $1 AND active_pid IS NOT NULL`, name)
		_, err := admin.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
WHERE database = $1 AND NOT active`, name)
		var left int
		if err == nil {
			err = admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, name).Scan(&left)
		}
		if err == nil && left == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := admin.ExecContext(ctx, `DROP DATABASE `+name+` WITH (FORCE)`); err != nil {
		t.Errorf("logicaltest: drop database %s: %v", name, err)
	}
}

// Open opens GORM on a new database (see DSN), closed when the test ends.
func Open(t tb.TB, cfg *gorm.Config) (*gorm.DB, string) {
	t.Helper()
	dsn := DSN(t)
	if cfg == nil {
		cfg = &gorm.Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = logger.Discard
	}
	db, err := gorm.Open(postgres.Open(dsn), cfg)
	if err != nil {
		t.Fatalf("logicaltest: open: %v", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db, dsn
}

// TestDecodingSlot creates a logical replication slot with the
// test_decoding plugin on db's database, from which Messages reads, and
// returns its name: a new one, since slot names are the server's, not a
// database's.
func TestDecodingSlot(t tb.TB, db *gorm.DB) string {
	t.Helper()
	name := SlotName()
	if err := db.Exec(`SELECT pg_create_logical_replication_slot(?, 'test_decoding')`, name).Error; err != nil {
		t.Fatalf("logicaltest: create slot %s: %v", name, err)
	}
	return name
}

// SlotName returns a new slot name: slot names are unique on the server,
// whichever database a slot decodes.
func SlotName() string { return pgtest.Name("herald_s_") }

// Messages consumes what slot (made by TestDecodingSlot) decoded since the
// last call and returns the contents of the transactional logical messages
// with prefix, in commit order.
func Messages(t tb.TB, db *gorm.DB, slot, prefix string) []string {
	t.Helper()
	var lines []string
	if err := db.Raw(`SELECT data FROM pg_logical_slot_get_changes(?, NULL, NULL)`, slot).Scan(&lines).Error; err != nil {
		t.Fatalf("logicaltest: read slot %s: %v", slot, err)
	}
	head := "message: transactional: 1 prefix: " + prefix + ", sz: "
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(l, head) {
			continue
		}
		_, content, ok := strings.Cut(l[len(head):], " content:")
		if !ok {
			t.Fatalf("logicaltest: unexpected line %q", l)
		}
		out = append(out, content)
	}
	return out
}
