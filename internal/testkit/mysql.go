package testkit

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/pgtest"
)

// MySQLServer is the MySQL or MariaDB server tests use: HERALD_TEST_MYSQL_DSN
// (a go-sql-driver DSN without a database), by default root on 127.0.0.1:3306.
func MySQLServer() string {
	if v := os.Getenv("HERALD_TEST_MYSQL_DSN"); v != "" {
		return v
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// MySQLDSN is the DSN of database name on the test server, with the settings
// Herald needs: clientFoundRows=true (an UPDATE reports the rows it matched,
// as GORM's Save expects), parseTime and UTC.
func MySQLDSN(server, name string) string {
	base := server
	params := ""
	if i := strings.IndexByte(base, '?'); i >= 0 {
		base, params = base[:i], base[i+1:]
	}
	base = strings.TrimSuffix(base, "/") + "/" + name
	q := "parseTime=true&loc=UTC&clientFoundRows=true"
	if params != "" {
		q += "&" + params
	}
	return base + "?" + q
}

var (
	mysqlOnce  sync.Once
	mysqlAdmin *sql.DB
	mysqlErr   error
)

func mysqlServer(t testing.TB) *sql.DB {
	t.Helper()
	mysqlOnce.Do(func() {
		mysqlAdmin, mysqlErr = sql.Open("mysql", MySQLDSN(MySQLServer(), ""))
		if mysqlErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			mysqlErr = mysqlAdmin.PingContext(ctx)
		}
	})
	if mysqlErr != nil {
		t.Fatalf("testkit: MySQL at %s is not reachable: %v", MySQLServer(), mysqlErr)
	}
	return mysqlAdmin
}

// MySQL is the MySQL or MariaDB server of this machine, a database per test.
var MySQL = Dialect{
	Name: "mysql",
	NewDSN: func(t testing.TB) string {
		t.Helper()
		admin := mysqlServer(t)
		name := pgtest.Name("herald_t_")
		if _, err := admin.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
			t.Fatalf("testkit: create database: %v", err)
		}
		t.Cleanup(func() {
			if _, err := admin.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
				t.Errorf("testkit: drop database %s: %v", name, err)
			}
		})
		return MySQLDSN(MySQLServer(), name)
	},
	Open: func(t testing.TB, dsn string, cfg *gorm.Config) *gorm.DB {
		t.Helper()
		db, err := gorm.Open(mysql.Open(dsn), quietConfig(cfg))
		if err != nil {
			t.Fatalf("testkit: open %s: %v", dsn, err)
		}
		closeAtCleanup(t, db)
		return db
	},
}
