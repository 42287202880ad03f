package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/testkit"
)

// One parser reads every duration: Go's units, days, both together; 0; a
// negative one refused as negative, one past a time.Duration as too large
// (not as negative, as the float conversion of the days made it before).
func TestParseDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"90m": 90 * time.Minute, "36h": 36 * time.Hour, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour,
		"1.5d": 36 * time.Hour, "300ms": 300 * time.Millisecond, "1h30m": 90 * time.Minute, "0": 0, "0s": 0, "+5m": 5 * time.Minute,
		"2us": 2 * time.Microsecond, "2µs": 2 * time.Microsecond, "106751d": 106751 * 24 * time.Hour, "-0": 0,
	} {
		d, err := parseDuration(s)
		if err != nil || d != want {
			t.Errorf("parseDuration(%q) = %s, %v; want %s", s, d, err, want)
		}
	}
	for s, want := range map[string]string{
		"soon": "not a duration", "5": "not a duration", "d": "not a duration", "1x": "not a duration", "": "not a duration",
		"1.2.3h": "not a duration", "5m ": "not a duration", "-5m": "negative", "-1d": "negative",
		"300000d": "too large (at most 106751d)", "106752d": "too large", "9999999999h": "too large", "2562048h": "too large",
		"9223372036854775808ns": "too large", strings.Repeat("9", 400) + "h": "too large",
	} {
		d, err := parseDuration(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseDuration(%q) = %s, %v; want an error saying %q", s, d, err, want)
		}
	}
}

// Every duration flag takes the same units (status --max-age 1d was refused
// while --older-than 7d was taken), and says what is wrong naming the flag.
func TestDurationFlags(t *testing.T) {
	e := newEnv(t, testkit.SQLite, true)
	ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"})
	e.stamp(ids[0], "created_at", 2*time.Hour)
	e.kill(ids[1], 36*time.Hour, "refused")
	e.must(exitUnhealthy, "status", "--max-age", "1h")
	e.must(exitUnhealthy, "status", "--max-age", "1d") // the dead event
	e.must(exitOK, "purge-dead", "--older-than", "1d")
	e.must(exitOK, "status", "--max-age", "1d")
	e.must(exitOK, "status", "--max-age=0d2h30m")
	e.must(exitUnhealthy, "status", "--max-age", "90m")
	if out := e.must(exitOK, "dead", "list", "--older-than", "1d12h"); out != "no dead events\n" {
		t.Fatalf("dead list --older-than 1d12h: %q", out)
	}
	for _, c := range []struct {
		args []string
		msgs []string
	}{
		{[]string{"status", "--max-age", "300000d"}, []string{`--max-age: "300000d" is too large (at most 106751d)`}},
		{[]string{"status", "--max-age", "9999999999h"}, []string{`--max-age: "9999999999h" is too large`}},
		{[]string{"dead", "list", "--older-than", "300000d"}, []string{`--older-than: "300000d" is too large`}},
		{[]string{"purge-dead", "--older-than", "99999999999999999999d"}, []string{`--older-than: "99999999999999999999d" is too large`}},
		{[]string{"status", "--max-age", "-1d"}, []string{`--max-age: "-1d" is negative`}},
		{[]string{"status", "--max-age", "1w"}, []string{`--max-age: "1w" is not a duration (90m, 36h, 7d, 1d12h)`}},
		{[]string{"purge-dead", "--older-than="}, []string{`--older-than: "" is not a duration`}},
	} {
		code, out, errs := e.run(c.args...)
		checkRefusal(t, c.args, exitUsage, c.msgs, code, out, errs)
		if strings.Contains(errs, "negative") && !strings.Contains(strings.Join(c.args, " "), "-1d") {
			t.Fatalf("herald %s: %q calls a huge value negative", strings.Join(c.args, " "), errs)
		}
	}
	// The help shows the default as written.
	if out := e.must(exitOK, "status", "--help"); !strings.Contains(out, "(default 5m)") {
		t.Fatalf("status --help:\n%s", out)
	}
}

// requeue --type T with no dead event of type T says so and exits 1 (a
// mistyped type looked like success: "requeued 0 dead events", exit 0), with
// --dry-run too; pending events of the type are not dead ones.
func TestRequeueUnknownType(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		ids := e.add(OrderPlaced{OrderID: "1"}, PaymentTaken{OrderID: "2"})
		e.kill(ids[0], time.Minute, "refused")
		for _, dry := range []string{"--dry-run", "--dry-run=false"} {
			e.refuse(exitFailed, []string{"herald requeue: no dead events of type order.plaice", "nothing"}, "requeue", dry, "--type", "order.plaice")
			e.refuse(exitFailed, []string{"no dead events of type payment.taken"}, "requeue", dry, "--type", "payment.taken")
		}
		if e.state(ids...) != "dead pending" {
			t.Fatalf("a refused requeue changed something: %s", e.state(ids...))
		}
		if out := e.must(exitOK, "requeue", "--type", "order.placed"); out != "requeued 1 dead event of type order.placed\n" {
			t.Fatalf("requeue --type: %q", out)
		}
		// Requeued just now, the event is young: --max-age counts from the
		// requeue, not from its insert a day ago.
		e.stamp(ids[1], "processed_at", time.Second)
		e.stamp(ids[0], "created_at", 24*time.Hour)
		e.kill(ids[0], time.Hour, "refused again")
		e.must(exitOK, "requeue", ids[0].String())
		e.must(exitOK, "status", "--max-age", "1m")
		e.refuse(exitFailed, []string{"no dead events of type order.placed"}, "requeue", "--type", "order.placed")
	})
}

// Payloads, metadata and errors print as JSON a person reads: <, > and & as
// they are (not \u003c), in dead show (text and --json), dead list --json and
// failing --json.
func TestReadableJSON(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		ids := e.add(OrderPlaced{OrderID: "<b>fish & chips</b>"}, OrderPlaced{OrderID: "2"})
		e.kill(ids[0], time.Minute, "refused: <html> & more")
		e.fail(ids[1])
		testkit.Must(t, e.db.Exec(`UPDATE outbox_messages SET last_error = ? WHERE id = ?`, "timeout <5s> & retry", ids[1].String()).Error)
		for _, args := range [][]string{{"dead", "show", ids[0].String()}, {"dead", "show", "--json", ids[0].String()}, {"dead", "list", "--json"},
			{"failing", "--json"}, {"failing", "--events", "--json"}} {
			out := e.must(exitOK, args...)
			if strings.Contains(out, `\u003c`) || strings.Contains(out, `\u0026`) || strings.Contains(out, `\u003e`) {
				t.Fatalf("herald %s escapes HTML:\n%s", strings.Join(args, " "), out)
			}
			want := `"OrderID": "<b>fish & chips</b>"`
			switch args[0] {
			case "failing":
				want = `"last_error": "timeout <5s> & retry"`
			case "dead":
				if args[1] == "list" {
					want = `"last_error": "refused: <html> & more"`
				}
			}
			if !strings.Contains(out, want) {
				t.Fatalf("herald %s lacks %s:\n%s", strings.Join(args, " "), want, out)
			}
			if strings.Contains(strings.Join(args, " "), "--json") {
				var v any
				testkit.Must(t, json.Unmarshal([]byte(out), &v))
			}
		}
	})
}

// herald failing: the failing events grouped by type and last error, the
// largest group first, with the most attempts, next attempt, last failure
// and error; --events lists them; --type and --limit pick; as JSON too;
// pending events that never failed and dead ones are not failing.
func TestFailingCommand(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		if out := e.must(exitOK, "failing"); out != "no failing events\n" {
			t.Fatalf("failing with none: %q", out)
		}
		ids := e.add(OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, PaymentTaken{OrderID: "3"}, OrderPlaced{OrderID: "4"}, OrderPlaced{OrderID: "5"})
		e.fail(ids[0])
		e.fail(ids[0])
		e.fail(ids[1])
		e.fail(ids[2])
		testkit.Must(t, e.db.Exec(`UPDATE outbox_messages SET last_error = ? WHERE id = ?`, "schema\nrefused", ids[2].String()).Error)
		e.stamp(ids[0], "available_at", -time.Hour)
		e.stamp(ids[1], "last_failed_at", time.Minute)
		e.kill(ids[4], time.Minute, "timeout")

		if out := e.must(exitUnhealthy, "status"); !strings.Contains(out, "\n3 failing events: herald failing shows why\n") {
			t.Fatalf("status does not point at herald failing:\n%s", out)
		}
		out := e.must(exitOK, "failing")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "TYPE EVENTS MAX ATTEMPTS NEXT ATTEMPT LAST FAILED LAST ERROR" ||
			strings.Join(strings.Fields(lines[1])[:3], " ") != "order.placed 2 2" || !strings.HasSuffix(lines[1], "timeout") ||
			strings.Join(strings.Fields(lines[2])[:3], " ") != "payment.taken 1 1" || !strings.HasSuffix(lines[2], "schema refused") {
			t.Fatalf("failing:\n%s", out)
		}
		out = e.must(exitOK, "failing", "--type", "payment.taken", "--json")
		var gs []admin.FailureGroup
		testkit.Must(t, json.Unmarshal([]byte(out), &gs))
		if len(gs) != 1 || gs[0].Type != "payment.taken" || gs[0].LastError != "schema\nrefused" || gs[0].Events != 1 {
			t.Fatalf("failing --type --json:\n%s", out)
		}
		if out := e.must(exitOK, "failing", "--limit", "1"); !strings.Contains(out, "(the first 1 groups; --limit shows more)") {
			t.Fatalf("failing --limit 1:\n%s", out)
		}

		out = e.must(exitOK, "failing", "--events")
		lines = strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID TYPE AGGREGATE ATTEMPTS STRIKES LAST FAILED NEXT ATTEMPT LAST ERROR" ||
			!strings.HasPrefix(lines[3], ids[0].String()) || strings.Contains(out, ids[3].String()) || strings.Contains(out, ids[4].String()) {
			t.Fatalf("failing --events (the one due in an hour last):\n%s", out)
		}
		out = e.must(exitOK, "failing", "--events", "--json", "--type", "order.placed")
		var evs []admin.FailingEvent
		testkit.Must(t, json.Unmarshal([]byte(out), &evs))
		if len(evs) != 2 || evs[0].ID != ids[1].String() || evs[0].LastFailedAt == nil || evs[1].Attempts != 2 ||
			time.Until(evs[1].NextAttemptAt) < 50*time.Minute {
			t.Fatalf("failing --events --json --type:\n%s", out)
		}
		e.refuse(exitUsage, []string{"--limit must be positive"}, "failing", "--limit", "0")
		e.refuse(exitUsage, []string{`unexpected argument "x"`}, "failing", "x")
	})
}
