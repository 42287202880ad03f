package main

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// status --tenants lists each tenant's outbox of a schema-per-tenant
// service (PostgreSQL schemas, MySQL databases, SQLite files), the unhealthy
// first, and exits with 3 when one is; each with the relay instance that
// beat last in its relays table ("-" when none ever did).
func TestStatusTenants(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		prefix := pgtest.Name("herald_ft_") + "_"
		dsnOf := map[string]string{}
		var pattern, dbURL string
		switch d.Name {
		case "postgres":
			admin := pgtest.Admin(t)
			for _, n := range []string{"a", "b", "c"} {
				testkit.Must(t, exec(admin, `CREATE SCHEMA `+prefix+n))
				pgtest.DropSchemaAtCleanup(t, prefix+n)
				dsnOf[n] = pgtest.WithSearchPath(pgtest.DSN(), prefix+n)
			}
			pattern, dbURL = prefix+"%", pgtest.DSN()
		case "mysql":
			admin := mysqltest.Admin(t)
			for _, n := range []string{"a", "b", "c"} {
				testkit.Must(t, exec(admin, "CREATE DATABASE `"+prefix+n+"`"))
				t.Cleanup(func() { _ = exec(admin, "DROP DATABASE IF EXISTS `"+prefix+n+"`") })
				dsnOf[n] = mysqltest.DSN(mysqltest.Server(), prefix+n)
			}
			pattern, dbURL = strings.ReplaceAll(prefix, "_", `\_`)+"%", databaseURL(t, "mysql", dsnOf["a"])
		default:
			dir := t.TempDir()
			for _, n := range []string{"a", "b", "c"} {
				dsnOf[n] = testkit.SQLiteDSN(filepath.Join(dir, prefix+n+".db"))
			}
			pattern, dbURL = filepath.Join(dir, prefix+"*.db"), "sqlite://"+filepath.Join(dir, prefix+"a.db")
		}
		dbOf := map[string]*gorm.DB{}
		for _, n := range []string{"b", "a", "c"} { // b's pending events the oldest
			events := map[string]int{"a": 1, "b": 3, "c": 0}[n]
			db := d.Open(t, dsnOf[n], nil)
			dbOf[n] = db
			testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Topic: testkit.OpsTopic})))
			for range events {
				testkit.Must(t, outboxhook.Add(db, OrderPlaced{OrderID: n}))
			}
			if n == "c" { // a dead event: unhealthy
				testkit.Must(t, outboxhook.Add(db, OrderPlaced{OrderID: n}))
				testkit.Must(t, db.Exec(`UPDATE outbox_messages SET dead_at = created_at`).Error)
			}
		}
		// a is relayed by the instance fleet-a, b and c never were.
		r, err := relay.New(dbOf["a"], testkit.NewGoChannel(), relay.Config{InstanceID: "fleet-a", PollInterval: 50 * time.Millisecond, Logger: testkit.Quiet()})
		testkit.Must(t, err)
		_, stop := testkit.Run(t, r.Run)
		testkit.Eventually(t, 30*time.Second, "fleet-a's heartbeat on a", func() bool {
			_, out, _ := run1(t, dbURL, "status", "--tenants", pattern)
			return strings.Contains(out, "fleet-a (")
		})
		stop()
		out := mustRun(t, dbURL, exitUnhealthy, "status", "--tenants", pattern)
		lines := strings.Split(out, "\n")
		servedBy := map[string]string{} // tenant: its SERVED BY cell
		col := -1
		for _, l := range lines {
			if strings.HasPrefix(l, "TENANT ") {
				col = strings.Index(l, "SERVED BY")
				continue
			}
			for _, n := range []string{"a", "b", "c"} {
				if f := strings.Fields(l); col >= 0 && len(l) > col && len(f) > 0 &&
					(strings.HasSuffix(f[0], prefix+n) || strings.HasSuffix(f[0], prefix+n+".db")) {
					servedBy[n] = strings.SplitN(l[col:], "  ", 2)[0]
				}
			}
		}
		if !strings.HasPrefix(servedBy["a"], "fleet-a (") || !strings.HasSuffix(servedBy["a"], " ago)") || servedBy["b"] != "-" || servedBy["c"] != "-" {
			t.Fatalf("status --tenants: SERVED BY = %q, want a by fleet-a, b and c by none (-):\n%s", servedBy, out)
		}
		var order []string
		for _, l := range lines {
			for _, n := range []string{"a", "b", "c"} {
				if strings.Contains(l, prefix+n) && !strings.HasPrefix(l, "3 tenants") {
					order = append(order, n)
				}
			}
		}
		if strings.Join(order, "") != "cba" || !strings.HasPrefix(out, "3 tenants of outbox_messages") ||
			!strings.Contains(out, "unhealthy: 1 of 3 tenants") {
			t.Fatalf("status --tenants printed, the worst first (c dead, then b, the oldest pending, then a) expected:\n%s", out)
		}
		var rep tenantsReport
		testkit.Must(t, json.Unmarshal([]byte(mustRun(t, dbURL, exitUnhealthy, "status", "--tenants", pattern, "--json")), &rep))
		if len(rep.Tenants) != 3 || rep.Healthy || rep.Tenants[1].Status == nil || rep.Tenants[1].Status.Total.Pending != 3 {
			t.Fatalf("status --tenants --json = %+v", rep)
		}
		for _, ts := range rep.Tenants {
			served := ts.Tenant == prefix+"a" || strings.HasSuffix(ts.Tenant, prefix+"a.db")
			if served && (ts.ServedBy != "fleet-a" || ts.ServedAgoSeconds == nil || *ts.ServedAgoSeconds < 0 || *ts.ServedAgoSeconds > 60) ||
				!served && (ts.ServedBy != "" || ts.ServedAgoSeconds != nil) {
				t.Fatalf("status --tenants --json: %s served by %q, %v seconds ago; want a by fleet-a, the others by none", ts.Tenant, ts.ServedBy, ts.ServedAgoSeconds)
			}
		}
		none := mustRun(t, dbURL, exitOK, "status", "--tenants", prefix+"nothing")
		if !strings.Contains(none, "no tenant matches") {
			t.Fatalf("status --tenants of nothing printed:\n%s", none)
		}
	})
}

func exec(db *sql.DB, q string) error {
	_, err := db.Exec(q)
	return err
}

// mustRun runs args on dbURL and fails unless the exit code is want and
// stderr is empty.
func mustRun(t *testing.T, dbURL string, want int, args ...string) string {
	t.Helper()
	code, out, errs := run1(t, dbURL, args...)
	if code != want || errs != "" {
		t.Fatalf("herald %s: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errs)
	}
	return out
}
