package testkit

import (
	"database/sql"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/testkit/tb"
	"github.com/heraldgo/herald/internal/testkit/testsql"
)

// MySQLServer is the MySQL or MariaDB server tests use (mysqltest.Server):
// HERALD_TEST_MYSQL_DSN, by default root on 127.0.0.1:3306.
func MySQLServer() string { return mysqltest.Server() }

// MySQLDSN is the DSN of database name on the test server, with the settings
// Herald needs (mysqltest.DSN).
func MySQLDSN(server, name string) string { return mysqltest.DSN(server, name) }

// MySQL is the MySQL or MariaDB server of this machine, a database per test.
var MySQL = Dialect{
	Name:   "mysql",
	NewDSN: func(t tb.TB) string { t.Helper(); return mysqltest.Database(t) },
	Open: func(t tb.TB, dsn string, cfg *gorm.Config) *gorm.DB {
		t.Helper()
		db, err := gorm.Open(mysql.Open(dsn), quietConfig(cfg))
		if err != nil {
			t.Fatalf("testkit: open %s: %v", dsn, err)
		}
		closeAtCleanup(t, db)
		return db
	},
	Dial: func(dsn string) (*gorm.DB, error) { return gorm.Open(mysql.Open(dsn), quietConfig(nil)) },
	SQL:  testsql.MySQL{},
}

// OpenMySQLOnConn opens GORM on an existing *sql.DB of dsn (a dialector with
// no DSN of its own, as a service that hands GORM its pool has), quiet,
// both closed at the test's end.
func OpenMySQLOnConn(t tb.TB, dsn string) *gorm.DB {
	t.Helper()
	sqlDB, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("testkit: open %s: %v", dsn, err)
	}
	db, err := gorm.Open(mysql.New(mysql.Config{Conn: sqlDB}), quietConfig(nil))
	if err != nil {
		_ = sqlDB.Close()
		t.Fatalf("testkit: open GORM on %s: %v", dsn, err)
	}
	closeAtCleanup(t, db)
	return db
}
