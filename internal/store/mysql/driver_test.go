package mysql_test

import (
	"database/sql"
	"testing"

	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/store/drivertest"
	"github.com/heraldgo/herald/internal/store/mysql"
	"github.com/heraldgo/herald/internal/testkit/tb"
	"github.com/heraldgo/herald/internal/testkit/testsql"
)

// TestDriver runs the driver-level suite on MySQL/MariaDB, a database per
// test.
func TestDriver(t *testing.T) {
	drivertest.Run(t, drivertest.Harness{Driver: mysql.Driver{}, SQL: testsql.MySQL{}, Open: func(t tb.TB) *sql.DB {
		t.Helper()
		db, err := sql.Open("mysql", mysqltest.Database(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}})
}
