package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/fleet"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// tenants are a test's fleet tenants, each a database of its own (a
// PostgreSQL schema, an SQLite file, a MySQL database) opened on demand by
// the fleet.
type tenants struct {
	t       *testing.T
	d       testkit.Dialect
	writers map[string]*gorm.DB // each tenant's application handle, with the outbox hook
	defs    []fleet.Tenant
}

func newTenants(t *testing.T, d testkit.Dialect) *tenants {
	return &tenants{t: t, d: d, writers: map[string]*gorm.DB{}}
}

// add makes tenant id, with its outbox table unless noTable.
func (ts *tenants) add(id string, noTable bool) {
	ts.t.Helper()
	dsn := ts.d.NewDSN(ts.t)
	if !noTable {
		db := ts.d.Open(ts.t, dsn, nil)
		testkit.Must(ts.t, db.Use(outboxhook.New(outboxhook.Config{Topic: testkit.OpsTopic})))
		ts.writers[id] = db
	}
	ts.defs = append(ts.defs, fleet.Tenant{ID: id, Open: func(context.Context) (*gorm.DB, error) { return ts.d.Dial(dsn) }})
}

func (ts *tenants) list(context.Context) ([]fleet.Tenant, error) { return ts.defs, nil }

// start runs a fleet named instance over the tenants, publishing to pub,
// until the test ends (or stop is called).
func (ts *tenants) start(pub message.Publisher, instance string, members *gorm.DB) (f *fleet.Fleet, stop func()) {
	ts.t.Helper()
	f, err := fleet.New(pub, fleet.Config{
		Tenants: ts.list,
		Relay:   relay.Config{PollInterval: 20 * time.Millisecond, InstanceID: instance, Logger: testkit.Quiet()},
		// The tests run side by side: the servers' connections are shared.
		MaxConns: 10, MinProbe: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Members: members, MemberTTL: 3 * time.Second,
		Logger: testkit.Quiet(),
	})
	testkit.Must(ts.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				ts.t.Errorf("fleet.Run: %v", err)
			}
		}
	}
	ts.t.Cleanup(stop)
	return f, stop
}

// tenantsJSON reads h's api/tenants.
func tenantsJSON(t *testing.T, h http.Handler) admin.TenantsReport {
	t.Helper()
	rep, _ := getJSON[admin.TenantsReport](t, h, "/api/tenants")
	return rep
}

func ids(rep admin.TenantsReport) []string {
	var out []string
	for _, x := range rep.Tenants {
		out = append(out, x.ID)
	}
	return out
}

// inOrder reports whether each of want is in body, in that order.
func inOrder(body string, want ...string) bool {
	at := 0
	for _, w := range want {
		i := strings.Index(body[at:], w)
		if i < 0 {
			return false
		}
		at += i + len(w)
	}
	return true
}

// A fleet of three tenants: "broken" (no outbox table: the fleet backs it
// off, failing), "refused" (the broker refuses its events: they stay pending
// and failing) and "ok" (published, one event scheduled for later). The
// tenants' JSON lists them worst first with their figures, the page too
// (the failing row highlighted), the main page and api/status count them,
// TenantLimit bounds the list, and past TenantTimeout the states are listed
// without figures.
func TestFleetTenants(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		ts := newTenants(t, d)
		ts.add("broken", true)
		ts.add("refused", false)
		ts.add("ok", false)
		testkit.AddEvents(t, context.Background(), ts.writers["refused"], OrderPlaced{OrderID: "1"}, OrderPlaced{OrderID: "2"}, OrderPlaced{OrderID: "3"})
		testkit.AddEvents(t, context.Background(), ts.writers["ok"], OrderPlaced{OrderID: "4"}, PaymentTaken{OrderID: "5"})
		testkit.ScheduleEvents(t, ts.writers["ok"], events.After(time.Hour), OrderPlaced{OrderID: "6"})
		pub := testkit.NewFailing(t, testkit.NewGoChannel(), testkit.FailError, func(m *message.Message) bool {
			return m.Metadata.Get(events.MetaTenant) == "refused"
		})
		f, _ := ts.start(pub, "fleet-1", nil)
		h := e.handler(admin.Config{Fleet: f})

		var rep admin.TenantsReport
		testkit.Eventually(t, 30*time.Second, "broken failing, refused's events failing, ok's published", func() bool {
			rep = tenantsJSON(t, h)
			if !slices.Equal(ids(rep), []string{"broken", "refused", "ok"}) {
				return false
			}
			b, r, o := rep.Tenants[0], rep.Tenants[1], rep.Tenants[2]
			return b.Failures > 0 && b.Error != "" && b.LastFailedAt != nil &&
				r.Pending == 3 && r.Failing == 3 && r.StatsError == "" &&
				o.Pending == 1 && o.Scheduled == 1 && o.Failing == 0 && o.StatsError == ""
		})
		b, r, o := rep.Tenants[0], rep.Tenants[1], rep.Tenants[2]
		if b.StatsError == "" || b.HasFigures() || b.Pending != 0 {
			t.Errorf("broken's figures read from a missing table: %+v", b)
		}
		if r.Failures != 0 || r.Error != "" || r.Dead != 0 || r.LastFailedAt != nil || r.OldestPendingSeconds < 0 || !r.HasFigures() {
			t.Errorf("refused: %+v", r)
		}
		if o.Failures != 0 || o.Dead != 0 || o.OldestPendingSeconds != 0 {
			t.Errorf("ok: %+v", o)
		}
		for _, x := range rep.Tenants {
			if x.Member != "fleet-1" || x.State == "" || x.State == "elsewhere" {
				t.Errorf("tenant %s: state %q, member %q", x.ID, x.State, x.Member)
			}
		}
		if rep.Total != 3 || rep.Failing != 1 || rep.More != 0 || rep.StatsError != "" || rep.At.IsZero() {
			t.Errorf("report: %+v", rep)
		}
		// The JSON names, snake_case as api/status's.
		_, body := serve(t, h, get("/api/tenants"))
		for _, want := range []string{`"id": "broken"`, `"state": `, `"member": "fleet-1"`, `"pending": 3`, `"failing": 3`, `"dead": 0`,
			`"oldest_pending_seconds": `, `"scheduled": 1`, `"error": "`, `"failures": `, `"last_failed_at": `, `"stats_error": "`, `"total": 3`, `"more": 0`} {
			if !strings.Contains(body, want) {
				t.Fatalf("api/tenants lacks %s:\n%s", want, body)
			}
		}

		res, body := serve(t, h, get("/tenants"))
		if res.Code != http.StatusOK {
			t.Fatalf("GET /tenants: %d %s", res.Code, body)
		}
		for _, want := range []string{`<p class="banner bad" id="tenants-health">1 of 3 tenants failing`, `<tr class="tenant failing">`,
			`<td class="c-id mono">fleet-1</td>`, `<a href="api/tenants">JSON</a>`} {
			if !strings.Contains(body, want) {
				t.Fatalf("the tenants page lacks %q:\n%s", want, body)
			}
		}
		if !inOrder(body, `<tr class="tenant failing">`+"\n"+`<td class="c-id"><code>broken</code>`,
			`<tr class="tenant">`+"\n"+`<td class="c-id"><code>refused</code></td>`, `<td class="n">3</td><td class="n">3</td>`,
			`<tr class="tenant">`+"\n"+`<td class="c-id"><code>ok</code></td>`, `<td class="n">1</td><td class="n">0</td><td class="n">0</td><td class="n">–</td><td class="n">1</td>`) {
			t.Fatalf("the tenants page does not list broken, refused, ok with their figures:\n%s", body)
		}

		// The main page and api/status count them, from the fleet's memory.
		_, body = serve(t, h, get("/"))
		if !strings.Contains(body, `<a href="tenants">tenants</a>`) || !strings.Contains(body, `3 tenants in the fleet, <span class="bad">1 failing</span> · by state: `) {
			t.Fatalf("the page lacks the tenants:\n%s", body)
		}
		_, body = serve(t, h, get("/api/status"))
		var st admin.Report
		testkit.Must(t, json.Unmarshal([]byte(body), &st))
		if st.Tenants == nil || st.Tenants.Total != 3 || st.Tenants.Failing != 1 || len(st.Tenants.States) == 0 {
			t.Fatalf("api/status tenants: %s", body)
		}

		// Bounded: the worst two, and one more.
		h2 := e.handler(admin.Config{Fleet: f, TenantLimit: 2})
		if rep := tenantsJSON(t, h2); !slices.Equal(ids(rep), []string{"broken", "refused"}) || rep.More != 1 || rep.Total != 3 {
			t.Fatalf("TenantLimit 2: %+v", rep)
		}
		_, body = serve(t, h2, get("/tenants"))
		if !strings.Contains(body, `<p class="muted" id="tenants-more">1 more not shown`) || strings.Contains(body, "<code>ok</code>") {
			t.Fatalf("TenantLimit 2, the page:\n%s", body)
		}

		// Figures not read in time: the states only, failing first.
		h3 := e.handler(admin.Config{Fleet: f, TenantTimeout: time.Nanosecond})
		rep = tenantsJSON(t, h3)
		if len(rep.Tenants) != 3 || rep.Tenants[0].ID != "broken" || rep.Tenants[0].Failures == 0 || !strings.Contains(rep.StatsError, "TenantTimeout") {
			t.Fatalf("TenantTimeout 1ns: %+v", rep)
		}
		for _, x := range rep.Tenants {
			if x.HasFigures() || x.Pending != 0 || x.StatsError != rep.StatsError {
				t.Errorf("TenantTimeout 1ns, tenant %+v", x)
			}
		}
		_, body = serve(t, h3, get("/tenants"))
		if !strings.Contains(body, `id="tenants-stats-error">No figures: the figures were not read within 1ns`) ||
			!strings.Contains(body, `<td class="n muted">–</td>`) {
			t.Fatalf("TenantTimeout 1ns, the page:\n%s", body)
		}
	})
}

// Two fleet processes share the tenants through a control database: the
// tenants page of one lists those it serves, with their figures, then those
// the other serves, with its name and no figures.
func TestFleetTenantsElsewhere(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		ts := newTenants(t, d)
		for _, id := range []string{"t0", "t1", "t2", "t3", "t4", "t5"} {
			ts.add(id, false)
		}
		control := d.OpenNew(t, nil)
		pub := testkit.NewGoChannel()
		a, _ := ts.start(pub, "member-a", control)
		ts.start(pub, "member-b", control)
		h := e.handler(admin.Config{Fleet: a})
		var rep admin.TenantsReport
		testkit.Eventually(t, 30*time.Second, "the tenants split between the members", func() bool {
			rep = tenantsJSON(t, h)
			here, there := 0, 0
			for _, x := range rep.Tenants {
				switch {
				case x.State == "elsewhere" && x.Member == "member-b" && !x.HasFigures():
					there++
				case x.State != "elsewhere" && x.Member == "member-a" && x.HasFigures() && there == 0:
					here++
				default:
					return false
				}
			}
			return here > 0 && there > 0 && here+there == 6
		})
		if rep.States["elsewhere"] == 0 || rep.Total != 6 {
			t.Errorf("report: %+v", rep)
		}
		testkit.Eventually(t, 30*time.Second, "the page listing both members' tenants", func() bool {
			_, body := serve(t, h, get("/tenants"))
			return inOrder(body, `<td class="c-id mono">member-a</td>`, `<td class="nowrap">elsewhere</td>`+"\n"+`<td class="c-id mono">member-b</td>`+"\n"+`<td class="n muted">–</td>`)
		})
	})
}

// Without a fleet, the tenants routes answer 404, and neither the page nor
// api/status mention tenants.
func TestFleetNone(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		h := e.handler(admin.Config{})
		res, body := serve(t, h, get("/api/tenants"))
		var je struct{ Error string }
		if res.Code != http.StatusNotFound || json.Unmarshal([]byte(body), &je) != nil || !strings.Contains(je.Error, "admin.Config.Fleet") {
			t.Fatalf("GET /api/tenants without a fleet: %d %s", res.Code, body)
		}
		if res, body := serve(t, h, get("/tenants")); res.Code != http.StatusNotFound || !strings.Contains(body, "admin.Config.Fleet") {
			t.Fatalf("GET /tenants without a fleet: %d %s", res.Code, body)
		}
		if _, body := serve(t, h, get("/")); strings.Contains(body, "tenants") {
			t.Fatalf("the page mentions tenants without a fleet:\n%s", body)
		}
		if _, body := serve(t, h, get("/api/status")); strings.Contains(body, `"tenants"`) {
			t.Fatalf("api/status has tenants without a fleet:\n%s", body)
		}
		for _, cfg := range []admin.Config{{TenantLimit: -1}, {TenantTimeout: -time.Second}} {
			if err := cfg.Validate(); err == nil {
				t.Errorf("%+v validates", cfg)
			}
		}
	})
}
