package main

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(logicaltest.Wrap(m)) }

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
			if err := run(context.Background(), 4, "gochannel", "table", c.url, name); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// With -storage wal, on the logical-level server, the events flow through
// the WAL and walrelay, and the run leaves no slot behind.
func TestExampleRunsWAL(t *testing.T) {
	dsn := logicaltest.DSN(t)
	name := pgtest.Name("herald_example_")
	if err := run(context.Background(), 4, "gochannel", "wal", dsn, name); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	testkit.Must(t, err)
	defer func() { _ = db.Close() }()
	var slots int
	testkit.Must(t, db.QueryRow(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&slots))
	if slots != 0 {
		t.Fatalf("the run left its slot %s behind", name)
	}
	if err := run(context.Background(), 1, "gochannel", "wal", "", name); err == nil || !strings.Contains(err.Error(), "needs PostgreSQL") {
		t.Fatalf("-storage wal on SQLite: %v", err)
	}
	if err := run(context.Background(), 1, "gochannel", "rows", "", name); err == nil {
		t.Fatal("-storage rows accepted")
	}
}

// mysqlURLPart turns go-sql-driver's user@tcp(host:port)/ into user@host:port.
func mysqlURLPart(server string) string {
	s := strings.TrimSuffix(server, "/")
	s = strings.Replace(s, "@tcp(", "@", 1)
	return strings.TrimSuffix(s, ")")
}

// With DATABASE_URL the example drops and recreates its schema (PostgreSQL)
// or database (MySQL), and says so; it refuses to drop one of that name it
// did not create (no herald_example_owner table), full or empty, and drops
// one an earlier run made.
func TestExampleDropsOnlyItsOwnSchema(t *testing.T) {
	for _, c := range []struct{ name, url, driver, dsn string }{
		{"postgres", pgtest.DSN(), "pgx", pgtest.DSN()},
		{"mysql", "mysql://" + mysqlURLPart(testkit.MySQLServer()) + "/test", "mysql", testkit.MySQLDSN(testkit.MySQLServer(), "")},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := pgtest.Name("herald_example_")
			admin, err := sql.Open(c.driver, c.dsn)
			testkit.Must(t, err)
			t.Cleanup(func() {
				_, _ = admin.Exec("DROP " + map[string]string{"postgres": "SCHEMA", "mysql": "DATABASE"}[c.name] + " IF EXISTS " + name + map[string]string{"postgres": " CASCADE"}[c.name])
				_ = admin.Close()
			})
			ddl := []string{"CREATE SCHEMA " + name, "CREATE TABLE " + name + ".customers (id int)"}
			if c.name == "mysql" {
				ddl[0] = "CREATE DATABASE " + name
			}
			for _, q := range ddl {
				testkit.Must(t, exec(admin, q))
			}
			err = run(context.Background(), 1, "gochannel", "table", c.url, name)
			if err == nil || !strings.Contains(err.Error(), "this example did not create it") {
				t.Fatalf("a schema the example did not create: %v", err)
			}
			var n int
			testkit.Must(t, admin.QueryRow("SELECT count(*) FROM "+name+".customers").Scan(&n)) // still there
			testkit.Must(t, exec(admin, "DROP TABLE "+name+".customers"))
			// Empty, but not the example's (as "public" on a new database).
			if err := run(context.Background(), 1, "gochannel", "table", c.url, name); err == nil || !strings.Contains(err.Error(), "this example did not create it") {
				t.Fatalf("an empty schema the example did not create: %v", err)
			}
			testkit.Must(t, exec(admin, "DROP "+map[string]string{"postgres": "SCHEMA", "mysql": "DATABASE"}[c.name]+" "+name))
			// A database's own schemas, never: refused before any lookup.
			for _, s := range []string{"public", "mysql", "information_schema"} {
				if err := run(context.Background(), 1, "gochannel", "table", c.url, s); err == nil || !strings.Contains(err.Error(), "a database's own schema") {
					t.Fatalf("-schema %s: %v", s, err)
				}
			}
			for range 2 { // made, then dropped and made again: the example's own
				if err := run(context.Background(), 1, "gochannel", "table", c.url, name); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func exec(db *sql.DB, q string) error {
	_, err := db.Exec(q)
	return err
}
