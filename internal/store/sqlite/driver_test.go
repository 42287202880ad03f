package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go

	"github.com/heraldgo/herald/internal/store/drivertest"
	"github.com/heraldgo/herald/internal/store/sqlite"
	"github.com/heraldgo/herald/internal/testkit/tb"
	"github.com/heraldgo/herald/internal/testkit/testsql"
)

// TestDriver runs the driver-level suite on SQLite, a file per test, opened
// as Herald asks (sqlite.DSN: WAL, write transactions that take the write
// lock at BEGIN, a 10 s busy timeout), with foreign keys on and
// synchronous=NORMAL.
func TestDriver(t *testing.T) {
	drivertest.Run(t, drivertest.Harness{Driver: sqlite.Driver{}, SQL: testsql.SQLite{}, Open: func(t tb.TB) *sql.DB {
		t.Helper()
		db, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "herald.db"))+"&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}})
}
