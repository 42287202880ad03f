// Package mysqltest gives each test a MySQL or MariaDB database of its own on
// the local server, dropped when the test ends (as pgtest does for
// PostgreSQL), for the tests below testkit: the driver's own.
package mysqltest

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

// Server is the MySQL or MariaDB server tests use: HERALD_TEST_MYSQL_DSN
// (a go-sql-driver DSN without a database), by default root on 127.0.0.1:3306.
func Server() string {
	if v := os.Getenv("HERALD_TEST_MYSQL_DSN"); v != "" {
		return v
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// DSN is the DSN of database name on the test server, with the settings
// Herald needs: clientFoundRows=true (an UPDATE reports the rows it matched,
// as GORM's Save expects), parseTime and UTC.
func DSN(server, name string) string {
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
	adminOnce sync.Once
	admin     *sql.DB
	adminErr  error
)

// Admin returns a shared handle on the server (no database), for set-up
// statements.
func Admin(t tb.TB) *sql.DB {
	t.Helper()
	adminOnce.Do(func() {
		admin, adminErr = sql.Open("mysql", DSN(Server(), ""))
		if adminErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			adminErr = admin.PingContext(ctx)
		}
	})
	if adminErr != nil {
		t.Fatalf("mysqltest: MySQL at %s is not reachable: %v", Server(), adminErr)
	}
	return admin
}

// Database makes a database of the test's own (utf8mb4, binary collation),
// dropped when it ends, and returns the DSN that opens it.
func Database(t tb.TB) string {
	t.Helper()
	a := Admin(t)
	name := pgtest.Name("herald_t_")
	if _, err := a.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("mysqltest: create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := a.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Errorf("mysqltest: drop database %s: %v", name, err)
		}
	})
	return DSN(Server(), name)
}
