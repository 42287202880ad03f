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
