package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"
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
// use only metric names, labels and label values Herald exports, as read
// through OpenTelemetry's Prometheus exporter from a relay that published,
// failed and killed events, from the gauges of a WAL relay's slot, and from
// a relay fleet whose first tenants label their metrics; the dashboard shows
// every one of them, fleet and tenants included, and the alerts watch the
// oldest pending age and the dead events (per tenant, named in the summary
// when the label is there), the slot's lag and the fleet's failing tenants.
func TestGrafanaDashboardAndAlerts(t *testing.T) {
	exported, labels := exportedMetrics(t)
	for _, want := range []string{"herald_outbox_pending", "herald_outbox_failing", "herald_outbox_dead",
		"herald_outbox_oldest_pending_age_seconds", "herald_relay_published_total", "herald_relay_failed_total",
		"herald_relay_dead_total", "herald_relay_publish_duration_seconds_bucket",
		"herald_outbox_dead_tuples", "herald_outbox_size_bytes", "herald_db_oldest_xact_age_seconds",
		"herald_wal_slot_lag_bytes", "herald_wal_slot_retained_bytes", "herald_wal_slot_age_seconds",
		"herald_wal_slot_active", "herald_wal_slot_usable", "herald_fleet_tenants", "herald_fleet_connections"} {
		if !exported[want] {
			t.Fatalf("the relay does not export %s (it exports %v)", want, sortedKeys(exported))
		}
	}
	// The fleet's labelled tenants: their counters and (b's, its relay
	// running) their outbox gauges carry the tenant.
	for name, tenant := range map[string]string{"herald_relay_published_total": "a", "herald_outbox_pending": "b",
		"herald_outbox_oldest_pending_age_seconds": "b", "herald_outbox_dead": "b", "herald_outbox_failing": "b"} {
		if !labels[name]["tenant"][tenant] {
			t.Fatalf("%s has no series of tenant %s: %v", name, tenant, labels[name])
		}
	}
	if labels["herald_relay_published_total"]["tenant"]["c"] {
		t.Fatal("tenant c, beyond TenantMetrics, labels its metrics")
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
			checkLabels(t, "dashboard panel "+p.Title, q.Expr, labels)
		}
	}
	for _, v := range dash.Templating.List {
		checkExpr(t, "dashboard variable "+v.Name, string(v.Query), exported)
		for _, m := range labelValues.FindAllStringSubmatch(string(v.Query), -1) {
			if len(labels[m[1]][m[2]]) == 0 {
				t.Fatalf("dashboard variable %s: %s has no label %s", v.Name, m[1], m[2])
			}
		}
	}
	for name := range exported {
		if !shown[name] && !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") {
			t.Fatalf("the dashboard does not show %s", name)
		}
	}
	for _, want := range []string{"Pending", "Failing", "Dead", "Oldest pending", "Publish rate", "Publish duration per batch", "WAL slot lag",
		"Fleet", "Tenants by state", "Failing tenants", "Fleet connections in use", "Top 10 tenants by backlog",
		"Top 10 tenants by oldest pending", "Publish rate by tenant (top 10)"} {
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
	perTenant := map[string]bool{} // metrics an alert watches per tenant, naming it
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Fatalf("rule %+v: needs alert, expr, a severity, a summary and a description", r)
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Fatalf("rule %s: for %q: %v", r.Alert, r.For, err)
			}
			names := checkExpr(t, "alert "+r.Alert, r.Expr, exported)
			for _, name := range names {
				watched[name] = r.Expr
			}
			checkLabels(t, "alert "+r.Alert, r.Expr, labels)
			// The annotations render as Prometheus renders them, with and
			// without a tenant; grouped by tenant, the summary names it
			// when there is one and does not speak of one otherwise.
			single := map[string]string{"table": "outbox_messages", "slot": "herald", "instance": "relay-1:9464"}
			tenanted := map[string]string{"table": "outbox_messages", "slot": "herald", "instance": "relay-1:9464", "tenant": "acme"}
			for key, text := range r.Annotations {
				renderAnnotation(t, r.Alert+" "+key, text, single)
				renderAnnotation(t, r.Alert+" "+key, text, tenanted)
			}
			if slices.Contains(grouping(r.Expr), "tenant") {
				if s := renderAnnotation(t, r.Alert, r.Annotations["summary"], tenanted); !strings.Contains(s, "acme") {
					t.Fatalf("alert %s groups by tenant; its summary does not name it: %q", r.Alert, s)
				}
				if s := renderAnnotation(t, r.Alert, r.Annotations["summary"], single); strings.Contains(s, "tenant") {
					t.Fatalf("alert %s speaks of a tenant without one: %q", r.Alert, s)
				}
				for _, name := range names {
					perTenant[name] = true
				}
			}
		}
	}
	for _, name := range []string{"herald_outbox_oldest_pending_age_seconds", "herald_outbox_dead", "herald_wal_slot_lag_bytes", "herald_fleet_tenants"} {
		if watched[name] == "" {
			t.Fatalf("no alert on %s", name)
		}
	}
	for _, name := range []string{"herald_outbox_oldest_pending_age_seconds", "herald_outbox_dead"} {
		if !perTenant[name] {
			t.Fatalf("no alert on %s per tenant", name)
		}
	}
	if !strings.Contains(watched["herald_outbox_dead"], "> 0") {
		t.Fatalf("the dead alert %q does not fire on one dead event", watched["herald_outbox_dead"])
	}
	if fl := watched["herald_fleet_tenants"]; !strings.Contains(fl, `state="failing"`) || !strings.Contains(fl, "> 0") {
		t.Fatalf("the fleet alert %q does not fire on one failing tenant", fl)
	}
}

var (
	heraldMetric = regexp.MustCompile(`\bherald_[a-zA-Z0-9_]+`)
	selector     = regexp.MustCompile(`\b(herald_[a-zA-Z0-9_]+)\s*\{([^}]*)\}`)
	matcher      = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	groupingRe   = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	labelValues  = regexp.MustCompile(`label_values\(\s*(herald_[a-zA-Z0-9_]+)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
)

// labelSet is, per exported metric name, the values of each of its labels.
type labelSet map[string]map[string]map[string]bool

// scrapeLabels are the labels Prometheus adds to every series it scrapes.
var scrapeLabels = []string{"instance", "job"}

// grouping returns the labels of expr's by, without, on and ignoring clauses.
func grouping(expr string) []string {
	var out []string
	for _, m := range groupingRe.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// checkLabels fails unless every label expr selects a Herald metric by is
// one of its exported labels (and a literal value it asks for, one of the
// exported values), and every label expr groups or matches by is a label of
// one of the Herald metrics it reads (or a scrape label).
func checkLabels(t *testing.T, where, expr string, labels labelSet) {
	t.Helper()
	for _, s := range selector.FindAllStringSubmatch(expr, -1) {
		name := s[1]
		for _, m := range matcher.FindAllStringSubmatch(s[2], -1) {
			label, op, value := m[1], m[2], m[3]
			values := labels[name][label]
			if len(values) == 0 {
				t.Fatalf("%s: %s has no label %s (its labels: %v)", where, name, label, labels[name])
			}
			if op == "=" && value != "" && !strings.Contains(value, "$") && !values[value] {
				t.Fatalf("%s: %s{%s} is never %q (it is one of %v)", where, name, label, value, values)
			}
		}
	}
	names := heraldMetric.FindAllString(expr, -1)
	for _, l := range grouping(expr) {
		if slices.Contains(scrapeLabels, l) {
			continue
		}
		if !slices.ContainsFunc(names, func(n string) bool { return len(labels[n][l]) > 0 }) {
			t.Fatalf("%s: groups by %s, a label none of %v has", where, l, names)
		}
	}
}

// renderAnnotation renders an alert rule's annotation as Prometheus does
// ($labels, $value, missing labels empty), with its functions stubbed.
func renderAnnotation(t *testing.T, where, text string, labels map[string]string) string {
	t.Helper()
	stub := func(v any) string { return fmt.Sprint(v) }
	tmpl, err := template.New(where).Option("missingkey=zero").Funcs(template.FuncMap{
		"humanize": stub, "humanize1024": stub, "humanizeDuration": stub, "humanizePercentage": stub,
	}).Parse("{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}" + text)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var b strings.Builder
	data := struct {
		Labels, ExternalLabels map[string]string
		Value                  float64
	}{labels, map[string]string{}, 3}
	if err := tmpl.Execute(&b, data); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	return b.String()
}

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

// exportedMetrics runs a relay on PostgreSQL with a Prometheus exporter until
// it has published events, failed some attempts and killed an event, a WAL
// relay streaming its slot, and a fleet of three tenants, two of them
// labelled, one of those relaying; it returns the metric names a query can
// use (a histogram's _bucket, _sum and _count) and their labels' values.
func exportedMetrics(t *testing.T) (map[string]bool, labelSet) {
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

	// A fleet, its tenant b's relay held in a Publish call while this
	// gathers.
	release := runMetricsFleet(t, mp)

	mfs, err := reg.Gather()
	release()
	testkit.Must(t, err)
	out, labels := map[string]bool{}, labelSet{}
	note := func(name string, m *dto.Metric) {
		if labels[name] == nil {
			labels[name] = map[string]map[string]bool{}
		}
		for _, l := range m.GetLabel() {
			if labels[name][l.GetName()] == nil {
				labels[name][l.GetName()] = map[string]bool{}
			}
			labels[name][l.GetName()][l.GetValue()] = true
		}
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "herald_") {
			continue
		}
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
			for _, m := range mf.GetMetric() {
				note(name+"_bucket", m)
				note(name+"_sum", m)
				note(name+"_count", m)
				for _, b := range m.GetHistogram().GetBucket() {
					le, bound := "le", fmt.Sprint(b.GetUpperBound())
					note(name+"_bucket", &dto.Metric{Label: []*dto.LabelPair{{Name: &le, Value: &bound}}})
				}
			}
			continue
		}
		out[name] = true
		for _, m := range mf.GetMetric() {
			note(name, m)
		}
		if strings.HasPrefix(name, "herald_fleet_") {
			continue // the fleet's own gauges: no table
		}
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
	return out, labels
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
