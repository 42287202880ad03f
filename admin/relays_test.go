package admin_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// run runs r until the test ends, or until the returned stop is called.
func run(t *testing.T, r *relay.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func relayOf(rs admin.Relays, name string) (admin.RelayInstance, bool) {
	for _, in := range rs.Instances {
		if in.Instance == name {
			return in, true
		}
	}
	return admin.RelayInstance{}, false
}

// Whether any relay is alive, from the database: before any relay of this
// version ran, it is unknown (no problem, whatever is due); an unordered
// relay records a heartbeat while it runs and keeps its row when it stops;
// once nothing was seen for longer than RelayTimeout while events have been
// due for longer than it, the outbox is unhealthy, the page says so in red
// and the JSON carries it.
func TestRelaysUnordered(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		ctx := context.Background()
		ids := e.add(OrderPlaced{OrderID: "1"})
		e.stamp(ids[0], "available_at", 5*time.Minute)
		o := e.open(admin.Config{})
		rs, err := o.Relays(ctx)
		testkit.Must(t, err)
		if rs.Known || rs.Alive != 0 || rs.Due != 1 || rs.OverdueSeconds < 290 || rs.Problem != "" {
			t.Fatalf("before any relay: %+v", rs)
		}

		r, err := relay.New(e.db, testkit.NewGoChannel(), relay.Config{InstanceID: "unordered-1", PollInterval: 50 * time.Millisecond, Logger: testkit.Quiet()})
		testkit.Must(t, err)
		stop := run(t, r)
		testkit.Eventually(t, 30*time.Second, "the relay alive, the event published", func() bool {
			rs, err = o.Relays(ctx)
			in, ok := relayOf(rs, "unordered-1")
			return err == nil && ok && in.Alive && rs.Alive == 1 && rs.Due == 0 && in.SeenSecondsAgo != nil && *in.SeenSecondsAgo < 30
		})
		stop()

		// Stopped five minutes ago, with an event due for three.
		at, arg := d.Ago(5 * time.Minute)
		testkit.Must(t, e.db.Exec(`UPDATE outbox_messages_relays SET seen_at = `+at, arg).Error)
		ids = e.add(OrderPlaced{OrderID: "2"})
		e.stamp(ids[0], "available_at", 3*time.Minute)
		st, err := o.Status(ctx)
		testkit.Must(t, err)
		rs = *st.Relays
		in, ok := relayOf(rs, "unordered-1")
		if !rs.Known || rs.Alive != 0 || !ok || in.Alive || rs.Due != 1 || !strings.HasPrefix(rs.Problem, "no relay seen for 5m") ||
			!strings.Contains(rs.Problem, "1 event is due, the longest for 3m") || st.Healthy || !strings.Contains(strings.Join(st.Problems, "; "), rs.Problem) {
			t.Fatalf("relay gone: %+v %+v", rs, st)
		}

		h := e.handler(admin.Config{})
		_, body := serve(t, h, get("/"))
		for _, want := range []string{`<p class="bad" id="relays-none">No relay seen for 5m`, "1 due event waits", "unordered-1", `<span class="bad">gone</span>`} {
			if !strings.Contains(body, want) {
				t.Fatalf("the page lacks %q:\n%s", want, body)
			}
		}
		_, body = serve(t, h, get("/api/status"))
		var rep admin.Report
		testkit.Must(t, json.Unmarshal([]byte(body), &rep))
		if rep.Status.Relays == nil || rep.Status.Relays.Alive != 0 || rep.Status.Relays.Problem != rs.Problem || len(rep.Status.Relays.Instances) != 1 {
			t.Fatalf("JSON relays: %s", body)
		}
	})
}

// An ordered relay is alive by its heartbeat (which its leases record) and
// its partition leases: the page lists it with the partitions it holds.
func TestRelaysOrdered(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		ctx := context.Background()
		r, err := relay.New(e.db, testkit.NewGoChannel(), relay.Config{Ordered: true, Partitions: 4, InstanceID: "ordered-1",
			PollInterval: 50 * time.Millisecond, Logger: testkit.Quiet()})
		testkit.Must(t, err)
		run(t, r)
		o := e.open(admin.Config{})
		var rs admin.Relays
		testkit.Eventually(t, 30*time.Second, "the relay alive with its four leases", func() bool {
			rs, err = o.Relays(ctx)
			in, ok := relayOf(rs, "ordered-1")
			return err == nil && ok && in.Alive && in.Partitions == 4 && in.LeaseLeftSeconds != nil && *in.LeaseLeftSeconds > 0 && rs.Alive == 1
		})
		_, body := serve(t, e.handler(admin.Config{}), get("/"))
		if !strings.Contains(body, "ordered-1") || !strings.Contains(body, `<td class="n">4</td><td class="nowrap">ends in `) || strings.Contains(body, "relays-none") {
			t.Fatalf("the page:\n%s", body)
		}
	})
}

// Control characters in what the database holds are escaped on the page as
// the herald command escapes them (admin.Printable): an ESC byte never
// reaches the browser.
func TestHandlerEscapesControlCharacters(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		e := newEnv(t, d)
		ids := e.add(OrderPlaced{OrderID: "1"})
		e.kill(ids[0], time.Minute, "refused \x1b[31mred\x1b[0m\nsecond\rline")
		h := e.handler(admin.Config{})
		for _, path := range []string{"/", "/dead/" + ids[0].String()} {
			_, body := serve(t, h, get(path))
			if strings.ContainsAny(body, "\x1b\r") || !strings.Contains(body, `refused \x1b[31mred\x1b[0m`+"\n"+`second\rline`) {
				t.Fatalf("GET %s: %q", path, body)
			}
		}
	})
}
