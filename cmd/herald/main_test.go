package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
)

func TestMain(m *testing.M) { pgtest.Main(logicaltest.Wrap(m)) }

// OrderPlaced goes to the topic "orders", PaymentTaken to "payments"
// (testkit.OpsTopic).
type (
	OrderPlaced  = testkit.OrderPlaced
	PaymentTaken = testkit.PaymentTaken
)

// env is a test's database with an outbox, and its DATABASE_URL.
type env struct {
	t   *testing.T
	d   testkit.Dialect
	db  *gorm.DB
	url string
}

// newEnv makes a database of the test's own; with outbox, the outbox table
// in it.
func newEnv(t *testing.T, d testkit.Dialect, outbox bool) *env {
	t.Helper()
	dsn := d.NewDSN(t)
	db := d.Open(t, dsn, nil)
	if outbox {
		testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Topic: testkit.OpsTopic})))
	}
	return &env{t: t, d: d, db: db, url: databaseURL(t, d.Name, dsn)}
}

// databaseURL is the DATABASE_URL of a test database's DSN.
func databaseURL(t *testing.T, dialect, dsn string) string {
	t.Helper()
	switch dialect {
	case "mysql":
		cfg, err := mysqldriver.ParseDSN(dsn)
		testkit.Must(t, err)
		u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName}
		if cfg.Passwd != "" {
			u.User = url.UserPassword(cfg.User, cfg.Passwd)
		} else {
			u.User = url.User(cfg.User)
		}
		return u.String()
	case "sqlite":
		// file:/path?params: as it is; sqlite:///path is tested apart.
		return dsn
	}
	return dsn
}

// run runs the command line with DATABASE_URL set to url.
func run1(t *testing.T, dbURL string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return dbURL
		}
		return ""
	}
	code = run(context.Background(), args, &out, &errb, getenv)
	return code, out.String(), errb.String()
}

func (e *env) run(args ...string) (int, string, string) {
	e.t.Helper()
	return run1(e.t, e.url, args...)
}

// must runs args and fails unless the exit code is want and stderr is empty.
func (e *env) must(want int, args ...string) string {
	e.t.Helper()
	code, out, errs := e.run(args...)
	if code != want || errs != "" {
		e.t.Fatalf("herald %s: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errs)
	}
	return out
}

// refuse runs args and fails unless the exit code is want, stdout is empty
// and stderr is one line holding each of msgs.
func (e *env) refuse(want int, msgs []string, args ...string) {
	e.t.Helper()
	code, out, errs := e.run(args...)
	checkRefusal(e.t, args, want, msgs, code, out, errs)
}

func checkRefusal(t *testing.T, args []string, want int, msgs []string, code int, out, errs string) {
	t.Helper()
	if code != want || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasSuffix(errs, "\n") {
		t.Fatalf("herald %s: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errs)
	}
	for _, m := range msgs {
		if !strings.Contains(errs, m) {
			t.Fatalf("herald %s: stderr %q lacks %q", strings.Join(args, " "), errs, m)
		}
	}
}

// state returns each event's state: pending, dead, processed or gone.
func (e *env) state(ids ...uuid.UUID) string {
	e.t.Helper()
	rows := map[uuid.UUID]testkit.Row{}
	for _, r := range testkit.Outbox(e.t, e.db) {
		rows[r.ID] = r
	}
	var out []string
	for _, id := range ids {
		r, ok := rows[id]
		switch {
		case !ok:
			out = append(out, "gone")
		case r.Dead:
			out = append(out, "dead")
		case r.Processed:
			out = append(out, "processed")
		default:
			out = append(out, "pending")
		}
	}
	return strings.Join(out, " ")
}

// status: the figures per topic and in total, as text and JSON (the same as
// the admin package's); exit 3 with dead events or a pending event older than
// --max-age, 0 when healthy; published in the last minute with a retention.
func TestStatusCommand(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		out := e.must(exitOK, "status")
		if !strings.Contains(out, "outbox_messages on "+d.Name) || !strings.HasSuffix(out, "\nhealthy\n") {
			t.Fatalf("empty outbox:\n%s", out)
		}

		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, OrderPlaced{OrderID: "3"}, PaymentTaken{OrderID: "4"})
		e.fail(ids[1])
		e.kill(ids[2], time.Minute, "refused")
		out = e.must(exitUnhealthy, "status")
		lines := strings.Split(out, "\n")
		if !strings.HasPrefix(lines[2], "TOPIC ") || strings.Contains(out, "PUBLISHED") ||
			strings.Join(strings.Fields(lines[3]), " ") != "orders 2 1 1 "+fieldAge(t, lines[3]) ||
			strings.Join(strings.Fields(lines[4])[:4], " ") != "payments 1 0 0" ||
			strings.Join(strings.Fields(lines[5])[:4], " ") != "total 3 1 1" ||
			!strings.HasSuffix(out, "\nunhealthy: 1 dead event\n") {
			t.Fatalf("status:\n%s", out)
		}

		out = e.must(exitUnhealthy, "status", "--json")
		var s admin.Status
		testkit.Must(t, json.Unmarshal([]byte(out), &s))
		if len(s.Topics) != 2 || s.Topics[0].Topic != "orders" || s.Topics[0].Failing != 1 || s.Total.Pending != 3 || s.Total.Dead != 1 ||
			s.Healthy || s.Problems[0] != "1 dead event" || s.Table != "outbox_messages" || s.Database != d.Name {
			t.Fatalf("status --json:\n%s", out)
		}

		// Too old a pending event, with no dead: 3; --max-age 0 turns the
		// check off; a larger --max-age passes.
		e.must(exitOK, "requeue", ids[2].String())
		e.stamp(ids[0], "created_at", 10*time.Minute)
		out = e.must(exitUnhealthy, "status")
		if !strings.Contains(out, "unhealthy: the oldest pending event is 10m0s old, over 5m0s") {
			t.Fatalf("status with an old event:\n%s", out)
		}
		e.must(exitOK, "status", "--max-age", "0")
		e.must(exitOK, "status", "--max-age=1h", "--json")

		// A retention: the published events of the last minute.
		e.stamp(ids[0], "processed_at", 5*time.Second)
		e.stamp(ids[1], "processed_at", 5*time.Second)
		out = e.must(exitOK, "status")
		if !strings.Contains(out, "PUBLISHED LAST MINUTE") || !strings.Contains(strings.Join(strings.Fields(out), " "), "orders 1 0 0") {
			t.Fatalf("status with a retention:\n%s", out)
		}
		out = e.must(exitOK, "status", "--json")
		testkit.Must(t, json.Unmarshal([]byte(out), &s))
		if !s.RetainsPublished || *s.Total.PublishedLastMinute != 2 {
			t.Fatalf("status --json with a retention:\n%s", out)
		}
	})
}

// fieldAge returns the age column of a status line (its last field).
func fieldAge(t *testing.T, line string) string {
	f := strings.Fields(line)
	if len(f) == 0 {
		t.Fatalf("empty status line")
	}
	return f[len(f)-1]
}

// dead list and dead show: the dead events with type, aggregate, attempts,
// strikes, last error; one with its payload and metadata; as JSON too.
func TestDeadCommands(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		e.must(exitOK, "dead", "list")
		ids := e.add(OrderPlaced{OrderID: "1"}, PaymentTaken{OrderID: "2"}, OrderPlaced{OrderID: "3"})
		e.kill(ids[0], 2*time.Hour, "broker refused:\nno route")
		e.kill(ids[1], time.Minute, "payload too large")

		out := e.must(exitOK, "dead", "list")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "ID TYPE AGGREGATE ATTEMPTS STRIKES DIED LAST ERROR" ||
			!strings.HasPrefix(lines[1], ids[0].String()) || !strings.Contains(lines[1], "order.placed") ||
			!strings.Contains(lines[1], " 12 ") || !strings.Contains(lines[1], " 11 ") || !strings.HasSuffix(lines[1], "broker refused: no route") ||
			!strings.HasPrefix(lines[2], ids[1].String()) {
			t.Fatalf("dead list:\n%s", out)
		}
		out = e.must(exitOK, "dead", "list", "--type", "payment.taken")
		if strings.Contains(out, ids[0].String()) || !strings.Contains(out, ids[1].String()) {
			t.Fatalf("dead list --type:\n%s", out)
		}
		out = e.must(exitOK, "dead", "list", "--older-than", "1h", "--json")
		var evs []admin.DeadEvent
		testkit.Must(t, json.Unmarshal([]byte(out), &evs))
		if len(evs) != 1 || evs[0].ID != ids[0].String() || evs[0].LastError != "broker refused:\nno route" || evs[0].Payload != nil {
			t.Fatalf("dead list --older-than 1h --json:\n%s", out)
		}
		out = e.must(exitOK, "dead", "list", "--limit", "1")
		if !strings.Contains(out, "(the first 1; --limit shows more)") {
			t.Fatalf("dead list --limit 1:\n%s", out)
		}

		out = e.must(exitOK, "dead", "show", ids[1].String())
		for _, want := range []string{"id:           " + ids[1].String(), "type:         payment.taken (version 1)", "topic:        payments",
			"aggregate:    none", "attempts:     12 (11 strikes)", "last error:   payload too large", `"tenant": "acme"`, `"OrderID": "2"`} {
			if !strings.Contains(out, want) {
				t.Fatalf("dead show lacks %q:\n%s", want, out)
			}
		}
		out = e.must(exitOK, "dead", "show", "--json", ids[1].String())
		var one admin.DeadEvent
		testkit.Must(t, json.Unmarshal([]byte(out), &one))
		if one.ID != ids[1].String() || !strings.Contains(string(one.Payload), `"OrderID"`) {
			t.Fatalf("dead show --json:\n%s", out)
		}

		e.refuse(exitFailed, []string{"herald dead show: no dead event", ids[2].String()}, "dead", "show", ids[2].String())
		e.refuse(exitUsage, []string{`"nope" is not an event id`}, "dead", "show", "nope")
		e.refuse(exitUsage, []string{"give one event id"}, "dead", "show")
		e.refuse(exitUsage, []string{"--older-than", `"soon" is not a duration`}, "dead", "list", "--older-than", "soon")
		e.refuse(exitUsage, []string{`unknown command "frob"`}, "dead", "frob")
	})
}

// requeue by ids (all or none), by type, all; each with --dry-run, which
// changes nothing.
func TestRequeueCommand(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, PaymentTaken{OrderID: "3"}, PaymentTaken{OrderID: "4"}, OrderPlaced{OrderID: "5"})
		for _, id := range ids[:4] {
			e.kill(id, time.Minute, "refused")
		}
		const allDead = "dead dead dead dead pending"

		out := e.must(exitOK, "requeue", ids[0].String(), "--dry-run", ids[1].String())
		if !strings.Contains(out, ids[0].String()) || !strings.Contains(out, ids[1].String()) ||
			!strings.HasSuffix(out, "dry run: would requeue 2 dead events\n") || e.state(ids...) != allDead {
			t.Fatalf("requeue --dry-run ids:\n%s", out)
		}
		out = e.must(exitOK, "requeue", "--dry-run", "--type", "payment.taken")
		if !strings.HasSuffix(out, "dry run: would requeue 2 dead events of type payment.taken\n") || strings.Contains(out, ids[0].String()) {
			t.Fatalf("requeue --dry-run --type:\n%s", out)
		}
		out = e.must(exitOK, "requeue", "--all", "--dry-run")
		if !strings.HasSuffix(out, "dry run: would requeue 4 dead events\n") || e.state(ids...) != allDead {
			t.Fatalf("requeue --dry-run --all:\n%s", out)
		}
		// An id that is not dead: nothing, with or without --dry-run.
		for _, dry := range []string{"--dry-run", "--table=outbox_messages"} {
			e.refuse(exitFailed, []string{"no dead event", ids[4].String(), "nothing"}, "requeue", dry, ids[0].String(), ids[4].String())
		}
		if e.state(ids...) != allDead {
			t.Fatal("a refused requeue changed something")
		}

		if out := e.must(exitOK, "requeue", ids[0].String()); out != "requeued 1 dead event\n" || e.state(ids...) != "pending dead dead dead pending" {
			t.Fatalf("requeue id: %q, %s", out, e.state(ids...))
		}
		if out := e.must(exitOK, "requeue", "--type", "payment.taken"); out != "requeued 2 dead events of type payment.taken\n" ||
			e.state(ids...) != "pending dead pending pending pending" {
			t.Fatalf("requeue --type: %q, %s", out, e.state(ids...))
		}
		if out := e.must(exitOK, "requeue", "--all"); out != "requeued 1 dead event\n" || testkit.Pending(t, e.db) != 5 {
			t.Fatalf("requeue --all: %q", out)
		}
		if out := e.must(exitOK, "requeue", "--all", "--dry-run"); out != "dry run: no dead events to requeue\n" {
			t.Fatalf("requeue --all --dry-run with none: %q", out)
		}

		e.refuse(exitUsage, []string{"give event ids, --type T or --all"}, "requeue")
		e.refuse(exitUsage, []string{"one of them"}, "requeue", "--all", ids[0].String())
		e.refuse(exitUsage, []string{"one of them"}, "requeue", "--all", "--type", "x")
		e.refuse(exitUsage, []string{`"42" is not an event id`}, "requeue", ids[0].String(), "42")
	})
}

// purge-dead deletes the dead events older than --older-than, never a pending
// or published one; --dry-run says which and deletes nothing.
func TestPurgeDeadCommand(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, OrderPlaced{OrderID: "3"}, OrderPlaced{OrderID: "4"})
		e.kill(ids[0], 10*24*time.Hour, "old")
		e.kill(ids[1], time.Hour, "young")
		e.stamp(ids[2], "created_at", 30*24*time.Hour) // an old pending event
		e.stamp(ids[3], "processed_at", 30*24*time.Hour)

		out := e.must(exitOK, "purge-dead", "--older-than", "7d", "--dry-run")
		if !strings.Contains(out, ids[0].String()) || strings.Contains(out, ids[1].String()) ||
			!strings.HasSuffix(out, "dry run: would purge 1 dead event that died more than 7d ago\n") {
			t.Fatalf("purge-dead --dry-run:\n%s", out)
		}
		if e.state(ids...) != "dead dead pending processed" {
			t.Fatal("a dry run purged")
		}
		if out := e.must(exitOK, "purge-dead", "--older-than", "7d"); out != "purged 1 dead event that died more than 7d ago\n" ||
			e.state(ids...) != "gone dead pending processed" {
			t.Fatalf("purge-dead: %q, %s", out, e.state(ids...))
		}
		if out := e.must(exitOK, "purge-dead", "--older-than=0s"); out != "purged 1 dead event that died more than 0s ago\n" ||
			e.state(ids...) != "gone gone pending processed" {
			t.Fatalf("purge-dead 0s: %q, %s", out, e.state(ids...))
		}

		e.refuse(exitUsage, []string{"--older-than: required"}, "purge-dead")
		e.refuse(exitUsage, []string{`"-5m" is negative`}, "purge-dead", "--older-than", "-5m")
		e.refuse(exitUsage, []string{`unexpected argument "now"`}, "purge-dead", "--older-than", "1h", "now")
	})
}

// migrate status, up, print on each database: a fresh database has every
// migration pending; up applies them (then nothing); print is the SQL.
func TestMigrateCommand(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, false)
		fsys, err := migrations.ForDatabase(d.Name)
		testkit.Must(t, err)
		migs, err := migrations.List(fsys)
		testkit.Must(t, err)
		n := len(migs)
		out := e.must(exitOK, "migrate", "status")
		if strings.Count(out, "pending") != n || !strings.Contains(strings.Join(strings.Fields(out), " "), "0001 outbox_messages pending") ||
			!strings.HasSuffix(out, fmt.Sprintf("%d to apply: herald migrate up\n", n)) {
			t.Fatalf("migrate status, fresh:\n%s", out)
		}
		var applied strings.Builder
		for _, m := range migs {
			fmt.Fprintf(&applied, "applied %04d_%s\n", m.Version, m.Name)
		}
		out = e.must(exitOK, "migrate", "up", "--db", d.Name)
		if n < 4 || out != applied.String() {
			t.Fatalf("migrate up:\n%s", out)
		}
		if !testkit.TableExists(t, e.db, "outbox_messages") || !testkit.TableExists(t, e.db, "inbox_messages") {
			t.Fatal("migrate up made no tables")
		}
		out = e.must(exitOK, "migrate", "status")
		if strings.Count(out, "  applied\n") != n || !strings.HasSuffix(out, "every migration is applied\n") {
			t.Fatalf("migrate status, applied:\n%s", out)
		}
		if out := e.must(exitOK, "migrate", "up"); out != "nothing to apply: every migration is applied\n" {
			t.Fatalf("migrate up again: %q", out)
		}
		// The tables work: status reads them.
		e.must(exitOK, "status")

		out = e.must(exitOK, "migrate", "print")
		if !strings.HasPrefix(out, "-- herald migration 0001_outbox_messages.up.sql ("+d.Name+")\n") ||
			!strings.Contains(out, "CREATE TABLE IF NOT EXISTS") || !strings.Contains(out, "0003_inbox_messages.up.sql") {
			t.Fatalf("migrate print:\n%s", out)
		}
		other := map[string]string{"postgres": "sqlite", "sqlite": "mysql", "mysql": "postgres"}[d.Name]
		e.refuse(exitUsage, []string{"--db " + other + ", but DATABASE_URL is a " + d.Name + " database"}, "migrate", "status", "--db", other)
	})
}

// migrate print --db needs no database: the SQL of each, up or down.
func TestMigratePrint(t *testing.T) {
	for db, want := range map[string]string{"postgres": "timestamptz", "sqlite": "INTEGER PRIMARY KEY", "mysql": "ENGINE=InnoDB"} {
		fsys, err := migrations.ForDatabase(db)
		testkit.Must(t, err)
		migs, err := migrations.List(fsys)
		testkit.Must(t, err)
		code, out, errs := run1(t, "", "migrate", "print", "--db", db)
		if code != exitOK || errs != "" || !strings.Contains(out, want) || strings.Count(out, "-- herald migration ") != len(migs) {
			t.Fatalf("migrate print --db %s: %d %s\n%s", db, code, errs, out)
		}
		_, out, _ = run1(t, "", "migrate", "print", "--db", db, "--down")
		if !strings.HasPrefix(out, "-- herald migration "+migs[len(migs)-1].Down) || !strings.Contains(out, "DROP TABLE") {
			t.Fatalf("migrate print --down --db %s:\n%s", db, out)
		}
	}
	for _, c := range []struct {
		args []string
		msgs []string
	}{
		{[]string{"migrate", "print", "--db", "oracle"}, []string{`--db "oracle"`}},
		{[]string{"migrate", "print"}, []string{"say --db postgres, sqlite or mysql, or set DATABASE_URL"}},
		{[]string{"--table", "events", "migrate", "print", "--db", "sqlite"}, []string{"--table events: the migrations are for the default table names"}},
		{[]string{"migrate"}, []string{"say up, status or print"}},
		{[]string{"migrate", "sideways"}, []string{`unknown command "sideways"`}},
		{[]string{"migrate", "up", "--down"}, []string{"--down is for print"}},
	} {
		code, out, errs := run1(t, "", c.args...)
		checkRefusal(t, c.args, exitUsage, c.msgs, code, out, errs)
	}
}

// Bad input: one line on stderr, nothing on stdout, a non-zero exit.
func TestBadInput(t *testing.T) {
	sq := newEnv(t, testkit.SQLite, true)
	e := newEnv(t, testkit.Postgres, false) // no outbox table
	for _, c := range []struct {
		url  string
		args []string
		code int
		msgs []string
	}{
		{"", []string{"status"}, exitFailed, []string{"herald status: DATABASE_URL is not set"}},
		{"oracle://db", []string{"status"}, exitFailed, []string{`unknown scheme "oracle"`}},
		{"no scheme", []string{"status"}, exitFailed, []string{"DATABASE_URL has no scheme"}},
		{"postgres://u:secret@[::1", []string{"status"}, exitFailed, []string{"DATABASE_URL is not a URL"}},
		{"postgres://u:secret@127.0.0.1:1/db", []string{"status"}, exitFailed, []string{"postgres at 127.0.0.1:1", "refused"}},
		{"mysql://root:secret@127.0.0.1:1/db", []string{"dead", "list"}, exitFailed, []string{"mysql at 127.0.0.1:1", "refused"}},
		{"mysql://root@127.0.0.1:3306", []string{"status"}, exitFailed, []string{"names no database"}},
		{"sqlite:///nowhere/herald.db", []string{"status"}, exitFailed, []string{"no SQLite database at /nowhere/herald.db"}},
		{e.url, []string{"status"}, exitFailed, []string{"no table outbox_messages in the postgres database"}},
		{sq.url, []string{"--table", "events", "dead", "list"}, exitFailed, []string{"no table events in the sqlite database"}},
		{sq.url, []string{"status", "--table", "bad name"}, exitUsage, []string{`--table: table "bad name"`}},
		{sq.url, []string{"frob"}, exitUsage, []string{`herald: unknown command "frob" (see herald help)`}},
		{sq.url, []string{"status", "--verbose"}, exitUsage, []string{"herald status: flag provided but not defined: -verbose (see herald status --help)"}},
		{sq.url, []string{"--verbose", "status"}, exitUsage, []string{"flag provided but not defined: -verbose"}},
		{sq.url, []string{"status", "--max-age", "soon"}, exitUsage, []string{`--max-age: "soon" is not a duration`}},
		{sq.url, []string{"status", "extra"}, exitUsage, []string{`unexpected argument "extra"`}},
		{sq.url, []string{"dead"}, exitUsage, []string{"say list, show, groups, requeue, purge or audit"}},
	} {
		code, out, errs := run1(t, c.url, c.args...)
		checkRefusal(t, c.args, c.code, c.msgs, code, out, errs)
		if strings.Contains(errs, "secret") {
			t.Fatalf("a password in %q", errs)
		}
	}
	// No command: the usage, on stderr.
	if code, out, errs := run1(t, "", []string{}...); code != exitUsage || out != "" || !strings.Contains(errs, "Exit codes:") {
		t.Fatalf("no command: %d %q %q", code, out, errs)
	}
	// Help: on stdout, exit 0.
	for _, args := range [][]string{{"help"}, {"--help"}, {"status", "-h"}, {"requeue", "--help"}, {"migrate", "--help"}, {"dead", "list", "--help"}} {
		code, out, errs := run1(t, "", args...)
		if code != exitOK || errs != "" || !strings.Contains(out, "Usage: herald") && !strings.Contains(out, "Usage:\n  herald") {
			t.Fatalf("herald %s: %d %q %q", strings.Join(args, " "), code, out, errs)
		}
	}
}

// The DATABASE_URL forms: sqlite:///path and file:path open the same file;
// mysql:// becomes go-sql-driver's DSN with the settings Herald needs.
func TestDatabaseURLs(t *testing.T) {
	e := newEnv(t, testkit.SQLite, true)
	e.add(OrderPlaced{OrderID: "1"})
	path := strings.TrimPrefix(strings.SplitN(e.url, "?", 2)[0], "file:")
	for _, u := range []string{"sqlite://" + path, "file:" + path, "file://" + path, "sqlite://" + path + "?_pragma=busy_timeout(5000)"} {
		code, out, errs := run1(t, u, "status", "--json")
		if code != exitOK || !strings.Contains(out, `"pending": 1`) {
			t.Fatalf("%s: %d %s %s", u, code, out, errs)
		}
	}
	got, err := parseURL("mysql://app:p%40ss:w@db.internal/shop?tls=skip-verify")
	testkit.Must(t, err)
	if got.dsn != "app:p@ss:w@tcp(db.internal:3306)/shop?clientFoundRows=true&loc=UTC&parseTime=true&tls=skip-verify" || got.where != "db.internal:3306" {
		t.Fatalf("mysql DSN %q (%s)", got.dsn, got.where)
	}
	cfg, err := mysqldriver.ParseDSN(got.dsn)
	testkit.Must(t, err)
	if cfg.Passwd != "p@ss:w" || !cfg.ClientFoundRows || !cfg.ParseTime || cfg.Loc != time.UTC {
		t.Fatalf("mysql config %+v", cfg)
	}
	got, err = parseURL("sqlite:///var/lib/app.db")
	testkit.Must(t, err)
	if got.file != "/var/lib/app.db" || got.dsn != "file:/var/lib/app.db?_pragma=busy_timeout%2810000%29&_pragma=journal_mode%28WAL%29&_txlock=immediate" {
		t.Fatalf("sqlite DSN %q", got.dsn)
	}
}

// On PostgreSQL a requeue wakes the relays of every process at once: it
// sends a NOTIFY on --channel, which a relay LISTENs on.
func TestRequeueWakesRelays(t *testing.T) {
	e := newEnv(t, testkit.Postgres, true)
	ids := e.add(OrderPlaced{OrderID: "1"})
	e.kill(ids[0], time.Minute, "refused")
	sqlDB, err := e.db.DB()
	testkit.Must(t, err)
	woken := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	d, err := drivers.For(e.db)
	testkit.Must(t, err)
	go func() {
		defer close(done)
		_ = d.Waker().Listen(ctx, sqlDB, "herald_ops_test", func(string) { woken <- struct{}{} })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-woken: // listening
	case <-time.After(10 * time.Second):
		t.Fatal("not listening")
	}

	e.refuse(exitUsage, []string{"--channel"}, "requeue", "--all", "--channel", "bad-name")
	e.must(exitOK, "requeue", "--all", "--channel", "herald_ops_test")
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("no NOTIFY on herald_ops_test within 10s")
	}
	if e.state(ids...) != "pending" {
		t.Fatal("not requeued")
	}
	// A requeue of nothing wakes nobody.
	e.must(exitOK, "requeue", "--all", "--channel", "herald_ops_test")
	select {
	case <-woken:
		t.Fatal("woken for nothing")
	case <-time.After(500 * time.Millisecond):
	}
}

// add writes events (with metadata) and returns their ids, in order.
func (e *env) add(evs ...events.Event) []uuid.UUID {
	e.t.Helper()
	ctx := events.WithMetadata(context.Background(), events.Metadata{"tenant": "acme"})
	return testkit.AddEvents(e.t, ctx, e.db, evs...)
}

func (e *env) kill(id uuid.UUID, d time.Duration, lastErr string) {
	e.d.KillEvent(e.t, e.db, id, d, lastErr)
}

func (e *env) stamp(id uuid.UUID, column string, d time.Duration) {
	e.d.StampEvent(e.t, e.db, id, column, d)
}

func (e *env) fail(id uuid.UUID) { testkit.FailEvent(e.t, e.db, id) }

// Values from the database that a terminal would act on (an escape sequence
// that clears the screen, a carriage return that hides what came before, a
// bidi override that reorders what follows, a C1 control, a NUL, bytes that
// are not UTF-8) are printed escaped in the human output, every row shown;
// --json keeps them exact.
func TestHostileValuesEscaped(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		hostile := "a\x1b[2J\rb\u202ec\u009bd"
		escaped := `a\x1b[2J\rb\u202ec\u009bd`
		if d.Name == "sqlite" { // what the others cannot store
			hostile += "\x00e\xff"
			escaped += `\x00e\xff`
		}
		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"})
		for _, col := range []string{"type", "topic", "aggregate_type", "aggregate_id"} {
			testkit.Must(t, testkit.SetOutboxColumn(e.db, ids[0], col, hostile))
		}
		testkit.Must(t, testkit.SetOutboxColumn(e.db, ids[0], "payload", `{"note":"`+"\u202eevil\u009b"+`"}`))
		e.kill(ids[0], time.Hour, hostile+"\nsecond line")
		e.kill(ids[1], time.Minute, "plain")

		clean := func(args []string, out string) {
			t.Helper()
			for i, r := range out {
				if r == utf8.RuneError || (r != '\n' && !strconv.IsPrint(r)) {
					t.Fatalf("herald %s: byte %d is %q:\n%s", strings.Join(args, " "), i, r, out)
				}
			}
		}
		args := []string{"dead", "list"}
		out := e.must(exitOK, args...)
		clean(args, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || !strings.Contains(lines[1], ids[0].String()+"  "+escaped+"  "+escaped+" "+escaped) ||
			!strings.HasPrefix(lines[2], ids[1].String()) {
			t.Fatalf("dead list:\n%s", out)
		}
		args = []string{"dead", "show", ids[0].String()}
		out = e.must(exitOK, args...)
		clean(args, out)
		for _, want := range []string{"type:         " + escaped + " (version 1)", "topic:        " + escaped,
			"aggregate:    " + escaped + " " + escaped, "last error:   " + escaped + "\n              second line",
			`"note": "\u202eevil\u009b"`} {
			if !strings.Contains(out, want) {
				t.Fatalf("dead show lacks %q:\n%s", want, out)
			}
		}
		args = []string{"status", "--max-age", "0"}
		code, out, errs := e.run(args...)
		clean(args, out)
		if code != exitUnhealthy || errs != "" || !strings.Contains(out, "\n"+escaped+"  ") {
			t.Fatalf("status: exit %d, stderr %q:\n%s", code, errs, out)
		}

		// JSON is exact (JSON has no way to carry bytes that are not UTF-8).
		exact := strings.ToValidUTF8(hostile, "\uFFFD")
		var evs []admin.DeadEvent
		testkit.Must(t, json.Unmarshal([]byte(e.must(exitOK, "dead", "list", "--json")), &evs))
		if len(evs) != 2 || evs[0].Type != exact || evs[0].AggregateID != exact || evs[0].AggregateType != exact ||
			evs[0].LastError != exact+"\nsecond line" {
			t.Fatalf("dead list --json: %+v", evs)
		}
		var one admin.DeadEvent
		testkit.Must(t, json.Unmarshal([]byte(e.must(exitOK, "dead", "show", "--json", ids[0].String())), &one))
		var payload map[string]string
		testkit.Must(t, json.Unmarshal(one.Payload, &payload))
		if one.Topic != exact || payload["note"] != "\u202eevil\u009b" {
			t.Fatalf("dead show --json: %+v", one)
		}
		var s admin.Status
		_, out, _ = e.run("status", "--json")
		testkit.Must(t, json.Unmarshal([]byte(out), &s))
		if len(s.Topics) == 0 || !slices.ContainsFunc(s.Topics, func(f admin.Figures) bool { return f.Topic == exact }) {
			t.Fatalf("status --json: %+v", s.Topics)
		}
	})
}
