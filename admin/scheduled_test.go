package admin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit"
)

// near fails unless d is within a minute of want.
func near(t *testing.T, what string, d, want time.Duration) {
	t.Helper()
	if d < want-time.Minute || d > want+time.Minute {
		t.Fatalf("%s = %v, want about %v", what, d, want)
	}
}

// Status has the scheduled events' figures (how many, the next due, the
// longest overdue); Scheduled lists them soonest due first, with their keys
// and due times, or only the overdue ones. A scheduled event waiting for its
// time is no pending event too old; one due counts from its due time.
func TestScheduled(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		o := e.open(admin.Config{})
		s, err := o.Status(ctx)
		testkit.Must(t, err)
		if s.Scheduled == nil || *s.Scheduled != (admin.ScheduledFigures{}) {
			t.Fatalf("scheduled figures of an empty outbox: %+v", s.Scheduled)
		}
		e.add(OrderPlaced{OrderID: "1"})
		soon := e.schedule(events.After(time.Hour).Keyed("reminder:2"), OrderPlaced{OrderID: "2"})[0]
		later := e.schedule(events.After(2*time.Hour), PaymentTaken{OrderID: "3"})[0]
		late := e.schedule(events.After(time.Hour), PaymentTaken{OrderID: "4"})[0]
		e.stamp(late, "created_at", 70*time.Minute) // saved 70 minutes ago, due an hour later
		e.overdue(late, 10*time.Minute)
		e.fail(late)
		e.stamp(later, "created_at", 3*time.Hour) // waiting for its time: not late

		s, err = o.Status(ctx)
		testkit.Must(t, err)
		if s.Scheduled.Count != 3 || s.Total.Pending != 4 {
			t.Fatalf("status: %d scheduled, %d pending; want 3 of 4", s.Scheduled.Count, s.Total.Pending)
		}
		near(t, "next due", s.Scheduled.NextDue(), time.Hour)
		near(t, "overdue", s.Scheduled.Overdue(), 10*time.Minute)
		near(t, "oldest pending", s.Total.OldestPending(), 10*time.Minute)

		evs, err := o.Scheduled(ctx, admin.ScheduledFilter{}, 10)
		testkit.Must(t, err)
		if len(evs) != 3 || evs[0].ID != late.String() || evs[1].ID != soon.String() || evs[2].ID != later.String() {
			t.Fatalf("scheduled events %+v, want late, soon, later", evs)
		}
		if e0, e1 := evs[0], evs[1]; e0.Type != "payment.taken" || e0.Topic != "payments" || e0.Attempts != 1 || e0.LastError != "timeout" ||
			e1.Key != "reminder:2" || e1.Type != "order.placed" || e1.Attempts != 0 || e1.OccurredAt.IsZero() {
			t.Fatalf("scheduled events %+v", evs)
		}
		near(t, "due in", time.Until(evs[1].DueAt), time.Hour)
		if evs, err := o.Scheduled(ctx, admin.ScheduledFilter{}, 1); err != nil || len(evs) != 1 || evs[0].ID != late.String() {
			t.Fatalf("scheduled, limit 1: %+v, %v", evs, err)
		}
		if evs, err := o.Scheduled(ctx, admin.ScheduledFilter{Overdue: true}, 10); err != nil || len(evs) != 1 || evs[0].ID != late.String() {
			t.Fatalf("overdue: %+v, %v", evs, err)
		}
	})
}

// PublishNow makes a scheduled event not due yet due now (its metadata's due
// time too) and wakes the relays; CancelScheduled deletes one. Neither
// changes an event due, published or dead already, or one unknown, and each
// says which.
func TestCancelAndPublishNow(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		woken := 0
		o := e.open(admin.Config{Wake: func() { woken++ }})
		plain := e.add(OrderPlaced{OrderID: "1"})[0]
		ids := e.schedule(events.After(time.Hour), OrderPlaced{OrderID: "2"}, OrderPlaced{OrderID: "3"}, OrderPlaced{OrderID: "4"})
		now, cancel, late := ids[0], ids[1], ids[2]
		e.overdue(late, time.Minute)

		out, err := o.PublishNow(ctx, now)
		testkit.Must(t, err)
		if out != admin.ScheduleMadeDue || !out.Changed() || woken != 1 {
			t.Fatalf("publish now: %s, woken %d", out, woken)
		}
		due, ok := events.DueAt(e.row(now).Metadata)
		if !ok {
			t.Fatalf("no due time in the metadata %v", e.row(now).Metadata)
		}
		near(t, "time since the new due time", time.Since(due), 0)
		if evs, err := o.Scheduled(ctx, admin.ScheduledFilter{Overdue: true}, 10); err != nil || len(evs) != 2 {
			t.Fatalf("overdue after publish now: %+v, %v", evs, err)
		}
		out, err = o.CancelScheduled(ctx, cancel)
		testkit.Must(t, err)
		if out != admin.ScheduleCancelled || e.exists(cancel) {
			t.Fatalf("cancel: %s, still there %v", out, e.exists(cancel))
		}

		for _, c := range []struct {
			what string
			f    func() (admin.ScheduleOutcome, error)
			want admin.ScheduleOutcome
		}{
			{"publish now again", func() (admin.ScheduleOutcome, error) { return o.PublishNow(ctx, now) }, admin.ScheduleDue},
			{"cancel a due event", func() (admin.ScheduleOutcome, error) { return o.CancelScheduled(ctx, late) }, admin.ScheduleDue},
			{"cancel again", func() (admin.ScheduleOutcome, error) { return o.CancelScheduled(ctx, cancel) }, admin.ScheduleNotFound},
			{"publish now an unscheduled event", func() (admin.ScheduleOutcome, error) { return o.PublishNow(ctx, plain) }, admin.ScheduleNotFound},
		} {
			out, err := c.f()
			if err != nil || out != c.want || out.Changed() {
				t.Fatalf("%s: %s, %v; want %s", c.what, out, err, c.want)
			}
		}
		e.kill(late, time.Second, "refused")
		e.stamp(now, "processed_at", time.Second)
		if out, err := o.CancelScheduled(ctx, late); err != nil || out != admin.ScheduleDead {
			t.Fatalf("cancel a dead event: %s, %v", out, err)
		}
		if out, err := o.PublishNow(ctx, now); err != nil || out != admin.SchedulePublished {
			t.Fatalf("publish now a published event: %s, %v", out, err)
		}
		if woken != 1 {
			t.Fatalf("woken %d times, want once", woken)
		}
	})
}

// The page shows the scheduled events' figures and list, soonest due first,
// an overdue one in red past MaxAge, with publish-now and cancel buttons for
// those not due yet (with writes only); the buttons do it, the page says
// what became of the event, a JSON client gets the outcome (404 unknown, 409
// too late); a cross-origin POST is refused.
func TestHandlerScheduled(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		woken := 0
		h := e.handler(admin.Config{AllowWrites: true, Wake: func() { woken++ }})
		_, body := serve(t, h, get("/"))
		if !strings.Contains(body, "Scheduled events (0)") || !strings.Contains(body, "No scheduled events.") {
			t.Fatalf("a page without scheduled events:\n%s", body)
		}
		ids := e.schedule(events.After(time.Hour).Keyed("reminder:<1>"), OrderPlaced{OrderID: "1"}, PaymentTaken{OrderID: "2"})
		soon, other := ids[0], ids[1]
		late := e.schedule(events.After(time.Hour), OrderPlaced{OrderID: "3"})[0]
		e.stamp(late, "created_at", 70*time.Minute)
		e.overdue(late, 10*time.Minute)

		_, body = serve(t, h, get("/"))
		for _, want := range []string{"Scheduled events (3)", `id="scheduled"`, "Next due in 59m", `<span class="bad">overdue: the earliest due one came due 10m`,
			`<span class="bad">due 10m`, "<code>reminder:&lt;1&gt;</code>", `action="publish-now"`, `action="cancel-scheduled"`,
			`name="id" value="` + soon.String() + `"`} {
			if !strings.Contains(body, want) {
				t.Fatalf("the page lacks %q:\n%s", want, body)
			}
		}
		if i, j := strings.Index(body, `id="scheduled-`+late.String()), strings.Index(body, `id="scheduled-`+soon.String()); i < 0 || j < i {
			t.Fatal("the overdue event is not listed first")
		}
		if strings.Contains(body, `name="id" value="`+late.String()+`"`) {
			t.Fatal("buttons for an event due already")
		}
		_, body = serve(t, e.handler(admin.Config{}), get("/"))
		if strings.Contains(body, "<form") || !strings.Contains(body, "Scheduled events (3)") {
			t.Fatalf("a read-only page with a form, or without the scheduled events:\n%s", body)
		}
		_, body = serve(t, e.handler(admin.Config{ScheduledLimit: 1, MaxAge: time.Hour}), get("/"))
		if !strings.Contains(body, "2 more not shown") || strings.Contains(body, `class="bad"`) {
			t.Fatalf("the page with ScheduledLimit 1, MaxAge 1h:\n%s", body)
		}

		form := url.Values{"id": {soon.String()}}
		for _, path := range []string{"/publish-now", "/cancel-scheduled"} {
			res, body := serve(t, h, post(path, form, "cross-site", "https://evil.example"))
			if res.Code != http.StatusForbidden || !strings.Contains(body, "cross-origin") {
				t.Fatalf("cross-origin POST %s: %d %s", path, res.Code, body)
			}
		}
		if woken != 0 || !e.exists(soon) {
			t.Fatal("a cross-origin POST changed something")
		}

		res, _ := serve(t, h, post("/publish-now", form, "same-origin", "http://admin.example"))
		loc := res.Header().Get("Location")
		if res.Code != http.StatusSeeOther || loc != "./?id="+soon.String()+"&scheduled=made_due" || woken != 1 {
			t.Fatalf("publish now: %d %s, woken %d", res.Code, loc, woken)
		}
		_, body = serve(t, h, get("/"+strings.TrimPrefix(loc, "./")))
		if !strings.Contains(body, "Scheduled event "+soon.String()+" is due now: the relays publish it.") {
			t.Fatalf("no word of the publish now:\n%s", body)
		}
		res, _ = serve(t, h, post("/cancel-scheduled", form, "same-origin", ""))
		loc = res.Header().Get("Location")
		if res.Code != http.StatusSeeOther || loc != "./?id="+soon.String()+"&scheduled=due" || !e.exists(soon) {
			t.Fatalf("cancel a due event: %d %s", res.Code, loc)
		}
		_, body = serve(t, h, get("/"+strings.TrimPrefix(loc, "./")))
		if !strings.Contains(body, "is due already (being published, or waiting for a retry): too late to change it.") {
			t.Fatalf("no word of the refusal:\n%s", body)
		}

		// JSON: the outcome, with 200, 404 or 409.
		for _, c := range []struct {
			path, id string
			status   int
			outcome  admin.ScheduleOutcome
		}{
			{"/cancel-scheduled", other.String(), http.StatusOK, admin.ScheduleCancelled},
			{"/cancel-scheduled", other.String(), http.StatusNotFound, admin.ScheduleNotFound},
			{"/publish-now", late.String(), http.StatusConflict, admin.ScheduleDue},
		} {
			r := post(c.path, url.Values{"id": {c.id}}, "same-origin", "")
			r.Header.Set("Accept", "application/json")
			res, body := serve(t, h, r)
			var got struct {
				ID      string
				Outcome admin.ScheduleOutcome
			}
			testkit.Must(t, json.Unmarshal([]byte(body), &got))
			if res.Code != c.status || got.ID != c.id || got.Outcome != c.outcome {
				t.Fatalf("POST %s %s: %d %s", c.path, c.id, res.Code, body)
			}
		}
		if e.exists(other) || woken != 1 {
			t.Fatalf("after the JSON POSTs: other still there %v, woken %d", e.exists(other), woken)
		}
		for _, f := range []url.Values{{"id": {"nope"}}, {}, {"id": {soon.String(), late.String()}}} {
			if res, _ := serve(t, h, post("/cancel-scheduled", f, "same-origin", "")); res.Code != http.StatusBadRequest {
				t.Fatalf("cancel %v: %d", f, res.Code)
			}
		}

		// The JSON has the figures and the list.
		res, body = serve(t, h, get("/api/status"))
		var rep admin.Report
		testkit.Must(t, json.Unmarshal([]byte(body), &rep))
		if res.Code != http.StatusOK || rep.Status.Scheduled == nil || rep.Status.Scheduled.Count != 2 || len(rep.Scheduled) != 2 ||
			rep.Scheduled[0].ID != late.String() || rep.Scheduled[1].Key != "reminder:<1>" {
			t.Fatalf("api/status: %d %s", res.Code, body)
		}
	})
}
