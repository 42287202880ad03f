package e2e

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	promclient "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.yaml.in/yaml/v3"

	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/walrelay"
)

// The Grafana dashboard and the Prometheus alert rules (examples/grafana)
// use only metric names Herald exports, as read through OpenTelemetry's
// Prometheus exporter from a relay that published, failed and killed
// events, and from the gauges of a WAL relay's slot; the dashboard shows
// every one of them, and the alerts watch the oldest pending age, the dead
// events and the slot's lag.
func TestGrafanaDashboardAndAlerts(t *testing.T) {
	exported := exportedMetrics(t)
	for _, want := range []string{"herald_outbox_pending", "herald_outbox_failing", "herald_outbox_dead",
		"herald_outbox_oldest_pending_age_seconds", "herald_relay_published_total", "herald_relay_failed_total",
		"herald_relay_dead_total", "herald_relay_publish_duration_seconds_bucket",
		"herald_outbox_dead_tuples", "herald_outbox_size_bytes", "herald_db_oldest_xact_age_seconds",
		"herald_wal_slot_lag_bytes", "herald_wal_slot_retained_bytes", "herald_wal_slot_age_seconds",
		"herald_wal_slot_active", "herald_wal_slot_usable"} {
		if !exported[want] {
			t.Fatalf("the relay does not export %s (it exports %v)", want, sortedKeys(exported))
		}
	}

	// The dashboard: every query's metrics are exported ones; every exported
	// metric is shown.
	var dash struct {
		UID        string
		Title      string
		Templating struct {
			List []struct {
				Name  string
				Query json.RawMessage
			}
		}
		Panels []struct {
			ID      int
			Type    string
			Title   string
			GridPos struct{ H, W, X, Y int }
			Targets []struct {
				RefID string
				Expr  string
			}
		}
	}
	b, err := os.ReadFile("../../grafana/herald-dashboard.json")
	testkit.Must(t, err)
	testkit.Must(t, json.Unmarshal(b, &dash))
	if dash.UID == "" || dash.Title == "" {
		t.Fatal("the dashboard has no uid or title")
	}
	shown := map[string]bool{}
	ids := map[int]bool{}
	var titles []string
	for _, p := range dash.Panels {
		if ids[p.ID] || p.Title == "" || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Fatalf("panel %d %q: a repeated id, no title or a bad gridPos %+v", p.ID, p.Title, p.GridPos)
		}
		ids[p.ID] = true
		titles = append(titles, p.Title)
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Fatalf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			for _, name := range checkExpr(t, "dashboard panel "+p.Title, q.Expr, exported) {
				shown[name] = true
			}
		}
	}
	for _, v := range dash.Templating.List {
		checkExpr(t, "dashboard variable "+v.Name, string(v.Query), exported)
	}
	for name := range exported {
		if !shown[name] && !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") {
			t.Fatalf("the dashboard does not show %s", name)
		}
	}
	for _, want := range []string{"Pending", "Failing", "Dead", "Oldest pending", "Publish rate", "Publish duration per batch", "WAL slot lag"} {
		if !slices.Contains(titles, want) {
			t.Fatalf("no panel %q among %q", want, titles)
		}
	}

	// The alert rules: well formed, on exported metrics, and the two the
	// seeds ask for.
	var rules struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert       string
				Expr        string
				For         string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	b, err = os.ReadFile("../../grafana/herald-alerts.yml")
	testkit.Must(t, err)
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	testkit.Must(t, dec.Decode(&rules))
	watched := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Fatalf("rule %+v: needs alert, expr, a severity, a summary and a description", r)
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Fatalf("rule %s: for %q: %v", r.Alert, r.For, err)
			}
			for _, name := range checkExpr(t, "alert "+r.Alert, r.Expr, exported) {
				watched[name] = r.Expr
			}
		}
	}
	for _, name := range []string{"herald_outbox_oldest_pending_age_seconds", "herald_outbox_dead", "herald_wal_slot_lag_bytes"} {
		if watched[name] == "" {
			t.Fatalf("no alert on %s", name)
		}
	}
	if !strings.Contains(watched["herald_outbox_dead"], "> 0") {
		t.Fatalf("the dead alert %q does not fire on one dead event", watched["herald_outbox_dead"])
	}
}

var heraldMetric = regexp.MustCompile(`\bherald_[a-zA-Z0-9_]+`)

// checkExpr fails unless every Herald metric expr names is exported, and
// returns them.
func checkExpr(t *testing.T, where, expr string, exported map[string]bool) []string {
	t.Helper()
	names := heraldMetric.FindAllString(expr, -1)
	for _, n := range names {
		if !exported[n] {
			t.Fatalf("%s: %s is not a metric Herald exports (%v)", where, n, sortedKeys(exported))
		}
	}
	return names
}

// exportedMetrics runs a relay on SQLite with a Prometheus exporter until it
// has published events, failed some attempts and killed an event, and
// returns the metric names a query can use (a histogram's _bucket, _sum and
// _count).
func exportedMetrics(t *testing.T) map[string]bool {
	reg := promclient.NewRegistry()
	exporter, err := prometheus.New(prometheus.WithRegisterer(reg), prometheus.WithoutScopeInfo())
	testkit.Must(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	// PostgreSQL: it reports the storage gauges too (the role, a superuser,
	// sees every session's transaction).
	e := newTopicEnv(t, testkit.Postgres, "accounts")
	ids := e.write(1, 2) // the first event is refused, the second confirms it
	var poison string
	for _, evs := range ids {
		poison = evs[0].String()
	}
	pub := testkit.NewFailing(t, testkit.NewGoChannel(), testkit.FailError, func(m *message.Message) bool { return m.UUID == poison })
	r, err := relay.New(e.db, pub, relay.Config{PollInterval: 20 * time.Millisecond, MaxAttempts: 1, Logger: quietLogger(), MeterProvider: mp})
	testkit.Must(t, err)
	e.run(r)
	eventually(t, 10*time.Second, "one dead, one published", func() bool {
		s, err := r.Stats(context.Background())
		return err == nil && s.Dead == 1 && s.Published == 1
	})

	// The WAL relay's slot gauges, of a slot a relay streams (the age is
	// observed only then), on the logical-level server.
	wdb, wdsn := logicaltest.Open(t, nil)
	testkit.Must(t, wdb.Use(outboxhook.New(outboxhook.Config{Storage: outboxhook.StorageWAL})))
	slot := logicaltest.SlotName()
	wr, err := walrelay.New(wdsn, testkit.NewGoChannel(), walrelay.Config{Slot: slot, Logger: quietLogger(), StatusInterval: 50 * time.Millisecond})
	testkit.Must(t, err)
	wctx, stop := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = wr.Run(wctx) }()
	t.Cleanup(func() { stop(); <-wdone })
	wsql, err := wdb.DB()
	testkit.Must(t, err)
	unobserve, err := walrelay.ObserveSlot(wsql, slot, mp)
	testkit.Must(t, err)
	t.Cleanup(unobserve)
	eventually(t, 20*time.Second, "the relay to stream its slot", func() bool {
		s, err := wr.Stats(context.Background())
		return err == nil && s.Active && s.AgeSeconds != nil
	})

	mfs, err := reg.Gather()
	testkit.Must(t, err)
	out := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "herald_") {
			continue
		}
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
			continue
		}
		out[name] = true
		label, value := "table", "outbox_messages"
		if strings.HasPrefix(name, "herald_wal_") {
			label, value = "slot", slot
		}
		for _, m := range mf.GetMetric() {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }) {
				t.Fatalf("%s has no %s label: %v", name, label, m.GetLabel())
			}
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
