package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/walrelay"
)

// walEnv is a database of the logical-level server written in StorageWAL:
// no outbox table.
func walEnv(t *testing.T) *env {
	t.Helper()
	db, dsn := logicaltest.Open(t, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Storage: outboxhook.StorageWAL, Topic: testkit.OpsTopic})))
	return &env{t: t, d: testkit.Postgres, db: db, url: dsn}
}

// wal setup makes the slot, status shows it (healthy within --max-wal-lag,
// unhealthy past it), wal drop removes it, and status then says it is
// missing.
func TestWALCommands(t *testing.T) {
	t.Parallel()
	e := walEnv(t)
	slot := logicaltest.SlotName()
	if out := e.must(exitOK, "wal", "setup", "--slot", slot); !strings.Contains(out, "slot "+slot+" and publication herald are ready") {
		t.Fatalf("wal setup: %s", out)
	}
	e.must(exitOK, "wal", "setup", "--slot", slot) // again: nothing to do
	// Setup also made the table the relay parks refused events in; without
	// it (a slot made by hand) status works on the slot alone.
	var tables int64
	testkit.Must(t, e.db.Raw(`SELECT count(*) FROM pg_tables WHERE tablename = 'outbox_messages' AND schemaname = current_schema()`).Scan(&tables).Error)
	if tables != 1 {
		t.Fatalf("wal setup made %d outbox tables, want 1 (where refused events are parked)", tables)
	}
	testkit.Must(t, e.db.Exec(`DROP TABLE outbox_messages`).Error)

	out := e.must(exitOK, "status", "--wal-slot", slot)
	for _, want := range []string{"WAL slot " + slot + ": no relay streams it, wal_status reserved", "lag ", "retained ",
		"no table outbox_messages: the events are kept in the WAL", "healthy"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "TOPIC") || strings.Contains(out, "last report") {
		t.Fatalf("status of a slot no relay streams, without a table:\n%s", out)
	}

	for range 30 { // 300 kB of WAL
		testkit.Must(t, outboxhook.Add(e.db, OrderPlaced{OrderID: strings.Repeat("x", 10_000)}))
	}
	out = e.must(exitUnhealthy, "status", "--wal-slot", slot, "--max-wal-lag", "100kB")
	if !strings.Contains(out, "unhealthy: WAL slot "+slot+" lags by") || !strings.Contains(out, "over 97.7 KiB") {
		t.Fatalf("status past --max-wal-lag:\n%s", out)
	}
	e.must(exitOK, "status", "--wal-slot", slot, "--max-wal-lag", "0")
	e.must(exitOK, "status", "--wal-slot", slot) // 1GiB by default

	var s struct {
		TableMissing bool                `json:"table_missing"`
		WAL          walrelay.SlotStatus `json:"wal_slot"`
		Healthy      bool
	}
	testkit.Must(t, json.Unmarshal([]byte(e.must(exitUnhealthy, "status", "--json", "--wal-slot", slot, "--max-wal-lag", "1000")), &s))
	if !s.TableMissing || s.WAL.Slot != slot || !s.WAL.Exists || s.WAL.LagBytes < 300_000 || s.Healthy {
		t.Fatalf("status --json: %+v", s)
	}

	out = e.must(exitOK, "wal", "drop", "--slot", slot)
	if out != "dropped slot "+slot+"\ndropped publication herald\n" {
		t.Fatalf("wal drop: %q", out)
	}
	if out := e.must(exitOK, "wal", "drop", "--slot", slot); out != "no slot "+slot+"\nno publication herald\n" {
		t.Fatalf("wal drop again: %q", out)
	}
	out = e.must(exitUnhealthy, "status", "--wal-slot", slot)
	if !strings.Contains(out, "WAL slot "+slot+": missing") || !strings.Contains(out, "replication slot does not exist") {
		t.Fatalf("status of a dropped slot:\n%s", out)
	}
}

// Without --wal-slot, status shows the slot "herald" when it exists, and
// only then. The only test of the package that makes a slot of that name
// (slot names are the server's).
func TestStatusFindsDefaultSlot(t *testing.T) {
	t.Parallel()
	e := walEnv(t)
	e.refuse(exitFailed, []string{"no table outbox_messages", "--wal-slot"}, "status")
	e.must(exitOK, "wal", "setup")
	if out := e.must(exitOK, "status"); !strings.Contains(out, "WAL slot herald: no relay streams it") {
		t.Fatalf("status with the slot herald:\n%s", out)
	}
	// Another database's status does not show it: it is e's.
	walEnv(t).refuse(exitFailed, []string{"no table outbox_messages"}, "status")
	e.must(exitOK, "wal", "drop")
	// The table setup made (for parked events) stays; the slot is gone.
	if out := e.must(exitOK, "status"); strings.Contains(out, "WAL slot") {
		t.Fatalf("status after wal drop:\n%s", out)
	}
}

// A slot that was set up and is gone: wal setup (as the relay) refuses to
// make it again, saying from which position events may be lost; wal
// recreate makes it and prints the positions between which events may be
// lost; again, it has nothing to do.
func TestWALRecreate(t *testing.T) {
	t.Parallel()
	e := walEnv(t)
	slot := logicaltest.SlotName()
	e.must(exitOK, "wal", "setup", "--slot", slot)
	testkit.Must(t, e.db.Exec(`SELECT pg_drop_replication_slot(?)`, slot).Error)
	e.refuse(exitFailed, []string{"replication slot unusable: slot " + slot + " is gone", "events committed after ",
		"herald wal recreate --slot " + slot}, "wal", "setup", "--slot", slot)
	out := e.must(exitOK, "wal", "recreate", "--slot", slot)
	if !strings.Contains(out, "slot "+slot+" was gone; made again on ") || !strings.Contains(out, "(its last confirmed position known) and before ") ||
		!strings.Contains(out, "may never have been published") {
		t.Fatalf("wal recreate:\n%s", out)
	}
	if out := e.must(exitOK, "wal", "recreate", "--slot", slot); !strings.Contains(out, "is usable: nothing to recreate") {
		t.Fatalf("wal recreate of a usable slot:\n%s", out)
	}
	e.must(exitOK, "wal", "setup", "--slot", slot)
	e.must(exitOK, "wal", "drop", "--slot", slot)
	e.must(exitOK, "wal", "setup", "--slot", slot) // dropped on purpose: a first start
	e.must(exitOK, "wal", "drop", "--slot", slot)
}

// Bad command lines, and the WAL commands on another database than
// PostgreSQL.
func TestWALBadInput(t *testing.T) {
	sq := newEnv(t, testkit.SQLite, true)
	for _, c := range []struct {
		args []string
		code int
		msgs []string
	}{
		{[]string{"wal"}, exitUsage, []string{"herald wal: say setup, drop or recreate first (see herald wal --help)"}},
		{[]string{"wal", "frob"}, exitUsage, []string{`unknown command "frob" (setup, drop or recreate)`}},
		{[]string{"wal", "setup", "--slot", "Bad-Slot"}, exitUsage, []string{`invalid Slot "Bad-Slot"`}},
		{[]string{"wal", "drop", "extra"}, exitUsage, []string{`unexpected argument "extra"`}},
		{[]string{"wal", "setup"}, exitFailed, []string{"the WAL relay needs PostgreSQL; DATABASE_URL is a sqlite database"}},
		{[]string{"wal", "drop"}, exitFailed, []string{"needs PostgreSQL"}},
		{[]string{"status", "--wal-slot", "herald"}, exitUsage, []string{"--wal-slot: the WAL relay needs PostgreSQL"}},
		{[]string{"status", "--max-wal-lag", "lots"}, exitUsage, []string{`--max-wal-lag: "lots" is not a size`}},
		{[]string{"status", "--max-wal-lag", "-1GiB"}, exitUsage, []string{`--max-wal-lag: "-1GiB" is not a size`}},
	} {
		code, out, errs := sq.run(c.args...)
		checkRefusal(t, c.args, c.code, c.msgs, code, out, errs)
	}
	for _, args := range [][]string{{"wal", "--help"}, {"wal", "setup", "--help"}} {
		code, out, errs := run1(t, "", args...)
		if code != exitOK || errs != "" || !strings.Contains(out, "Usage: herald wal setup|drop|recreate") || !strings.Contains(out, "-slot") {
			t.Fatalf("herald %s: %d %q %q", strings.Join(args, " "), code, out, errs)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "1GiB": 1 << 30, "1gib": 1 << 30, "512MiB": 512 << 20,
		"2GB": 2e9, "100kB": 100_000, "1.5KiB": 1536, "10B": 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "1 parsec", "-1", "1e3", "99999999999TiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}
