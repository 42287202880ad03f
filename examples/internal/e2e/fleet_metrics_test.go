package e2e

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	promclient "github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/fleet"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

// A fleet's metrics through the Prometheus exporter: the first
// TenantMetrics tenants' relays carry their tenant, the others' counters add
// up unlabelled, and the fleet's own gauges count its tenants by state and
// the connections it holds.
func TestFleetMetrics(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		reg := promclient.NewRegistry()
		exporter, err := prometheus.New(prometheus.WithRegisterer(reg), prometheus.WithoutScopeInfo())
		testkit.Must(t, err)
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

		var tenants []fleet.Tenant
		for _, id := range []string{"a", "b", "c"} {
			tn, db := newFleetTenant(t, d, id)
			writeAccounts(t, db, 2)
			tenants = append(tenants, tn)
		}
		f := runMetricsTenants(t, gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), mp, tenants)

		published := func() map[string]float64 { // by tenant, "" for unlabelled
			out := map[string]float64{}
			mfs, err := reg.Gather()
			testkit.Must(t, err)
			for _, mf := range mfs {
				if mf.GetName() != "herald_relay_published_total" {
					continue
				}
				for _, m := range mf.GetMetric() {
					tenant := ""
					for _, l := range m.GetLabel() {
						if l.GetName() == "tenant" {
							tenant = l.GetValue()
						}
					}
					out[tenant] += m.GetCounter().GetValue()
				}
			}
			return out
		}
		testkit.Eventually(t, 20*time.Second, "6 published", func() bool {
			p := published()
			return p["a"]+p["b"]+p[""] == 6
		})
		if p := published(); p["a"] != 2 || p["b"] != 2 || p[""] != 2 || p["c"] != 0 {
			t.Errorf("published by tenant label = %v, want a and b labelled, c unlabelled", p)
		}
		mfs, err := reg.Gather()
		testkit.Must(t, err)
		states := map[string]float64{}
		var conns bool
		for _, mf := range mfs {
			switch mf.GetName() {
			case "herald_fleet_tenants":
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "state" {
							states[l.GetValue()] = m.GetGauge().GetValue()
						}
					}
				}
			case "herald_fleet_connections":
				conns = true
			}
		}
		var total float64
		for _, n := range states {
			total += n
		}
		if total != 3 || len(states) != 6 || !conns {
			t.Errorf("herald_fleet_tenants = %v (want the 3 tenants over 6 states), herald_fleet_connections seen: %v", states, conns)
		}

		// Idle, the labelled tenants' outbox gauges are still observed:
		// read from their databases at the collection.
		testkit.Eventually(t, 20*time.Second, "every tenant idle", func() bool {
			for _, s := range f.Status() {
				if s.State != "idle" {
					return false
				}
			}
			return true
		})
		mfs, err = reg.Gather()
		testkit.Must(t, err)
		pending := map[string]bool{}
		for _, mf := range mfs {
			if mf.GetName() != "herald_outbox_pending" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "tenant" {
						pending[l.GetValue()] = true
					}
				}
			}
		}
		if !pending["a"] || !pending["b"] || pending["c"] {
			t.Errorf("herald_outbox_pending observed for tenants %v while every tenant is idle, want a and b (labelled), not c", pending)
		}
	})
}

// newFleetTenant makes a database of the test's own on d with the outbox, for
// tenant id, and returns the tenant (the fleet opens and closes its pool)
// and the database to write it through.
func newFleetTenant(t *testing.T, d testkit.Dialect, id string) (fleet.Tenant, *gorm.DB) {
	t.Helper()
	dsn := d.NewDSN(t)
	db := d.Open(t, dsn, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{})))
	testkit.Must(t, db.AutoMigrate(&Account{}))
	return fleet.Tenant{ID: id, Open: func(context.Context) (*gorm.DB, error) { return d.Dial(dsn) }}, db
}

// writeAccounts commits n accounts of one event each through db.
func writeAccounts(t *testing.T, db *gorm.DB, n int) {
	t.Helper()
	for range n {
		a := &Account{ID: uuid.New()}
		a.Record(Deposited{AccountID: a.ID})
		testkit.Must(t, db.Create(a).Error)
	}
}

// runMetricsFleet runs a fleet of three PostgreSQL tenants, "a" and "b" with
// their tenant on their metrics (TenantMetrics 2) and "c" without, observed
// by mp, until each published its events; then it holds tenant b's relay in
// a Publish call (a broker that stopped answering) while it has an event
// pending, so that b's outbox gauges are observed with its tenant, and
// returns the function that lets b's relay go on. What mp's exporter reads
// meanwhile is what a fleet exports.
func runMetricsFleet(t *testing.T, mp *sdkmetric.MeterProvider) (release func()) {
	t.Helper()
	var (
		tenants []fleet.Tenant
		dbs     []*gorm.DB
	)
	for _, id := range []string{"a", "b", "c"} {
		tn, db := newFleetTenant(t, testkit.Postgres, id)
		writeAccounts(t, db, 2)
		tenants, dbs = append(tenants, tn), append(dbs, db)
	}
	var (
		holdB   atomic.Bool
		entered = make(chan struct{})
		enter   sync.Once
		freed   = make(chan struct{})
		free    sync.Once
	)
	release = func() { free.Do(func() { close(freed) }) }
	inner := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	pub := testkit.PublisherFunc(func(topic string, msgs ...*message.Message) error {
		if holdB.Load() && msgs[0].Metadata.Get(events.MetaTenant) == "b" {
			enter.Do(func() { close(entered) })
			<-freed
			return errors.New("held publisher released")
		}
		return inner.Publish(topic, msgs...)
	})
	f := runMetricsTenants(t, pub, mp, tenants)
	t.Cleanup(release) // before the fleet stops (cleanups run last first)
	testkit.Eventually(t, 20*time.Second, "every tenant's events published", func() bool {
		for _, db := range dbs {
			if testkit.Pending(t, db) != 0 {
				return false
			}
		}
		return true
	})
	holdB.Store(true)
	writeAccounts(t, dbs[1], 1)
	f.Wake("b")
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("tenant b's relay did not publish its new event")
	}
	return release
}

// runMetricsTenants runs, until the test ends, a fleet over tenants that
// publishes to pub, observed by mp, the first two tenants labelled
// (TenantMetrics 2), and returns it.
func runMetricsTenants(t *testing.T, pub message.Publisher, mp *sdkmetric.MeterProvider, tenants []fleet.Tenant) *fleet.Fleet {
	t.Helper()
	cfg := fleet.Config{TenantMetrics: 2, MaxConns: 10, Logger: quietLogger(),
		Tenants: func(context.Context) ([]fleet.Tenant, error) { return tenants, nil }}
	cfg.Relay.MeterProvider, cfg.Relay.PollInterval = mp, 50*time.Millisecond
	f, err := fleet.New(pub, cfg)
	testkit.Must(t, err)
	testkit.Run(t, f.Run)
	return f
}
