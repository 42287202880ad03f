package main

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The example runs end to end as a newcomer would run it: with nothing set (an
// SQLite file), and with DATABASE_URL naming PostgreSQL or MySQL.
func TestExampleRuns(t *testing.T) {
	for _, c := range []struct{ name, url string }{
		{"sqlite", ""},
		{"postgres", pgtest.DSN()},
		{"mysql", "mysql://" + mysqlURLPart(testkit.MySQLServer()) + "/test"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := pgtest.Name("herald_example_")
			switch c.name {
			case "postgres":
				pgtest.DropSchemaAtCleanup(t, name)
			case "mysql":
				t.Cleanup(func() {
					if db, err := sql.Open("mysql", testkit.MySQLDSN(testkit.MySQLServer(), "")); err == nil {
						_, _ = db.Exec("DROP DATABASE IF EXISTS `" + name + "`")
						_ = db.Close()
					}
				})
			}
			if err := run(context.Background(), 4, "gochannel", c.url, name); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// mysqlURLPart turns go-sql-driver's user@tcp(host:port)/ into user@host:port.
func mysqlURLPart(server string) string {
	s := strings.TrimSuffix(server, "/")
	s = strings.Replace(s, "@tcp(", "@", 1)
	return strings.TrimSuffix(s, ")")
}
