package postgres_test

import (
	"database/sql"
	"testing"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/store/drivertest"
	"github.com/heraldgo/herald/internal/store/postgres"
	"github.com/heraldgo/herald/internal/testkit/tb"
	"github.com/heraldgo/herald/internal/testkit/testsql"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestDriver runs the driver-level suite on PostgreSQL, a schema per test.
func TestDriver(t *testing.T) {
	drivertest.Run(t, drivertest.Harness{Driver: postgres.Driver{}, SQL: testsql.Postgres{}, Open: func(t tb.TB) *sql.DB {
		t.Helper()
		return pgtest.SchemaDB(t)
	}})
}
