package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit"
)

// schedule writes events scheduled by s and returns their ids, in order.
func (e *env) schedule(s events.Schedule, evs ...events.Event) []uuid.UUID {
	e.t.Helper()
	return testkit.ScheduleEvents(e.t, e.db, s, evs...)
}

// status shows the scheduled events' figures; scheduled list lists them,
// soonest due first, or the overdue ones, as text or JSON; scheduled
// publish-now makes one not due yet due now, scheduled cancel deletes one;
// both fail (exit 1) for an event due, published or dead already, or
// unknown, saying which.
func TestScheduledCommands(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d, true)
		if out := e.must(exitOK, "scheduled", "list"); out != "no scheduled events\n" {
			t.Fatalf("scheduled list of none: %q", out)
		}
		if out := e.must(exitOK, "scheduled", "list", "--overdue"); out != "no overdue scheduled events\n" {
			t.Fatalf("scheduled list --overdue of none: %q", out)
		}
		if out := e.must(exitOK, "status"); strings.Contains(out, "scheduled") {
			t.Fatalf("status with no scheduled event:\n%s", out)
		}
		plain := e.add(OrderPlaced{OrderID: "1"})[0]
		soon := e.schedule(events.After(time.Hour).Keyed("reminder:2"), OrderPlaced{OrderID: "2"})[0]
		later := e.schedule(events.After(2*time.Hour), PaymentTaken{OrderID: "3"})[0]
		late := e.schedule(events.After(time.Hour), PaymentTaken{OrderID: "4"})[0]
		e.stamp(late, "created_at", 70*time.Minute)
		e.stamp(late, "due_at", 10*time.Minute)
		e.stamp(late, "available_at", 10*time.Minute)

		out := e.must(exitUnhealthy, "status")
		if !strings.Contains(out, "\n3 scheduled events, the next due in 59m") ||
			!strings.Contains(out, "; overdue: the earliest due one came due 10m") || !strings.Contains(out, " ago, unpublished: herald scheduled list shows them\n") ||
			!strings.Contains(out, "the oldest pending event is 10m") {
			t.Fatalf("status:\n%s", out)
		}
		var s admin.Status
		testkit.Must(t, json.Unmarshal([]byte(e.must(exitOK, "status", "--json", "--max-age", "1h")), &s))
		if s.Scheduled == nil || s.Scheduled.Count != 3 || s.Scheduled.Overdue() < 9*time.Minute || s.Scheduled.NextDue() < 59*time.Minute {
			t.Fatalf("status --json: %+v", s.Scheduled)
		}

		out = e.must(exitOK, "scheduled", "list")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID TYPE AGGREGATE KEY DUE ATTEMPTS" ||
			!strings.HasPrefix(lines[1], late.String()) || !strings.Contains(lines[1], "  10m") ||
			!strings.HasPrefix(lines[2], soon.String()) || !strings.Contains(lines[2], "reminder:2") || !strings.Contains(lines[2], "in 59m") ||
			!strings.HasPrefix(lines[3], later.String()) || strings.Contains(out, plain.String()) {
			t.Fatalf("scheduled list:\n%s", out)
		}
		out = e.must(exitOK, "scheduled", "list", "--overdue")
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], late.String()) {
			t.Fatalf("scheduled list --overdue:\n%s", out)
		}
		var evs []admin.ScheduledEvent
		testkit.Must(t, json.Unmarshal([]byte(e.must(exitOK, "scheduled", "list", "--json")), &evs))
		if len(evs) != 3 || evs[1].ID != soon.String() || evs[1].Key != "reminder:2" || evs[1].Type != "order.placed" {
			t.Fatalf("scheduled list --json: %+v", evs)
		}
		if out := e.must(exitOK, "scheduled", "list", "--limit", "1"); !strings.Contains(out, "(the first 1; --limit shows more)") {
			t.Fatalf("scheduled list --limit 1:\n%s", out)
		}

		if out := e.must(exitOK, "scheduled", "publish-now", soon.String()); out != "scheduled event "+soon.String()+" is due now: the relays publish it\n" {
			t.Fatalf("scheduled publish-now: %q", out)
		}
		e.refuse(exitFailed, []string{"herald scheduled cancel: scheduled event " + soon.String() + " is due already", "nothing cancelled"},
			"scheduled", "cancel", soon.String())
		if out := e.must(exitOK, "scheduled", "cancel", later.String()); out != "cancelled scheduled event "+later.String()+": it will not be published\n" {
			t.Fatalf("scheduled cancel: %q", out)
		}
		if e.state(soon, later) != "pending gone" {
			t.Fatalf("after publish-now and cancel: %s", e.state(soon, later))
		}
		e.refuse(exitFailed, []string{"no scheduled event " + later.String()}, "scheduled", "cancel", later.String())
		e.refuse(exitFailed, []string{"no scheduled event " + plain.String()}, "scheduled", "publish-now", plain.String())
		e.kill(late, time.Minute, "refused")
		e.refuse(exitFailed, []string{"went dead", "herald dead show " + late.String()}, "scheduled", "cancel", late.String())
		e.stamp(soon, "processed_at", time.Second)
		e.refuse(exitFailed, []string{"herald scheduled publish-now: scheduled event " + soon.String() + " was published already: nothing changed"},
			"scheduled", "publish-now", soon.String())

		for _, c := range []struct {
			args []string
			msgs []string
		}{
			{[]string{"scheduled"}, []string{"herald scheduled: say list, cancel or publish-now (see herald help)"}},
			{[]string{"scheduled", "frob"}, []string{`unknown command "frob" (list, cancel or publish-now)`}},
			{[]string{"scheduled", "cancel"}, []string{"herald scheduled cancel: give one event id (see herald scheduled cancel --help)"}},
			{[]string{"scheduled", "cancel", "nope"}, []string{`"nope" is not an event id`}},
			{[]string{"scheduled", "publish-now", "--channel", "bad-name", soon.String()}, []string{"--channel"}},
			{[]string{"scheduled", "cancel", "--channel", "x", soon.String()}, []string{"flag provided but not defined: -channel"}},
			{[]string{"scheduled", "list", "--limit", "0"}, []string{"--limit must be positive"}},
			{[]string{"scheduled", "list", "x"}, []string{`unexpected argument "x"`}},
		} {
			e.refuse(exitUsage, c.msgs, c.args...)
		}
		for _, args := range [][]string{{"scheduled", "list", "--help"}, {"scheduled", "cancel", "--help"}, {"scheduled", "publish-now", "-h"}} {
			if out := e.must(exitOK, args...); !strings.Contains(out, "Usage: herald "+strings.Join(args[:2], " ")) {
				t.Fatalf("herald %s:\n%s", strings.Join(args, " "), out)
			}
		}
	})
}
