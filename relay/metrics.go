package relay

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/telemetry"
)

// metrics are the relay's counters, read by Stats, and its OpenTelemetry
// instruments (see Config.MeterProvider). With no SDK installed the
// instruments are no-ops.
type metrics struct {
	published, failed, dead atomic.Int64 // since start, for Stats

	meter                   metric.Meter
	attrs                   metric.MeasurementOption // the table
	*outbound.Instruments                            // the publish call's, shared with walrelay
	deadC                   metric.Int64Counter
	pending, failing, deadG metric.Int64ObservableGauge
	oldest                  metric.Float64ObservableGauge
	scheduled               metric.Int64ObservableGauge   // scheduled events not published
	nextScheduled, overdue  metric.Float64ObservableGauge // seconds
	deadTuples, size        metric.Int64ObservableGauge   // where the database reports them
	oldestXact              metric.Float64ObservableGauge
}

// newMetrics makes the instruments of a relay of cfg: their attribute is
// the table, and the tenant with Config.TenantMetrics.
func newMetrics(cfg Config) *metrics {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	attrs := []attribute.KeyValue{attribute.String("table", cfg.Table)}
	if cfg.TenantMetrics && cfg.Tenant != "" {
		attrs = append(attrs, attribute.String("tenant", cfg.Tenant))
	}
	m := &metrics{meter: mp.Meter(telemetry.ScopeName), attrs: metric.WithAttributes(attrs...)}
	// An instrument that cannot be made is left as a no-op: metrics never stop
	// the relay (the errors are those of a misconfigured SDK).
	m.Instruments = outbound.NewInstruments(m.meter, "herald.relay",
		"Time to publish one batch of events, from the first Publish call to the last return.", m.attrs)
	m.deadC, _ = m.meter.Int64Counter("herald.relay.dead", metric.WithUnit("{event}"),
		metric.WithDescription("Events that went dead in this relay."))
	m.pending, _ = m.meter.Int64ObservableGauge("herald.outbox.pending", metric.WithUnit("{event}"),
		metric.WithDescription("Events not yet published and not dead."))
	m.failing, _ = m.meter.Int64ObservableGauge("herald.outbox.failing", metric.WithUnit("{event}"),
		metric.WithDescription("Pending events whose publish failed at least once."))
	m.deadG, _ = m.meter.Int64ObservableGauge("herald.outbox.dead", metric.WithUnit("{event}"),
		metric.WithDescription("Dead events, waiting to be requeued."))
	m.oldest, _ = m.meter.Float64ObservableGauge("herald.outbox.oldest_pending_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest pending event."))
	m.scheduled, _ = m.meter.Int64ObservableGauge("herald.outbox.scheduled", metric.WithUnit("{event}"),
		metric.WithDescription("Scheduled events not yet published and not dead, due or not."))
	m.nextScheduled, _ = m.meter.Float64ObservableGauge("herald.outbox.next_scheduled", metric.WithUnit("s"),
		metric.WithDescription("Time until the earliest scheduled event not due yet comes due; 0 when none waits."))
	m.overdue, _ = m.meter.Float64ObservableGauge("herald.outbox.scheduled_overdue", metric.WithUnit("s"),
		metric.WithDescription("Time since the earliest scheduled event that is due and not yet published came due; 0 when none is."))
	m.deadTuples, _ = m.meter.Int64ObservableGauge("herald.outbox.dead_tuples", metric.WithUnit("{tuple}"),
		metric.WithDescription("The database's estimate of the outbox's dead row versions, not yet vacuumed (PostgreSQL)."))
	m.size, _ = m.meter.Int64ObservableGauge("herald.outbox.size", metric.WithUnit("By"),
		metric.WithDescription("Size of the outbox table with its indexes (PostgreSQL)."))
	m.oldestXact, _ = m.meter.Float64ObservableGauge("herald.db.oldest_xact_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest transaction holding back vacuum (PostgreSQL, when the role may see every session)."))
	return m
}

// record counts a batch's outcome.
func (m *metrics) record(o *outcome) {
	m.published.Add(int64(len(o.ok)))
	m.failed.Add(int64(len(o.failed)))
	m.Record(o.took, len(o.ok), len(o.failed))
}

// died counts events that went dead.
func (m *metrics) died(n int) {
	if n == 0 {
		return
	}
	m.dead.Add(int64(n))
	m.Add(m.deadC, n)
}

// observeOutbox registers the callback that reads the outbox gauges from the
// database (Stats, with a 5 s timeout) at each collection, for the time Run
// runs (or, with a relayhook.Gauges in Run's context, for as long as it
// keeps them); the returned function unregisters it. The storage gauges are observed
// only where the database reports them, the oldest transaction's age only
// when it is known.
func (r *Relay) observeOutbox() func() {
	if r.cfg.Tenant != "" && !r.cfg.TenantMetrics {
		return func() {} // the gauges of a fleet's tenants would overwrite each other
	}
	m := r.m
	gauges := []metric.Observable{m.pending, m.failing, m.deadG, m.oldest, m.scheduled, m.nextScheduled, m.overdue,
		m.deadTuples, m.size, m.oldestXact}
	for _, g := range gauges {
		if g == nil {
			return func() {}
		}
	}
	reg, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, st, err := r.stats(ctx)
		if err != nil {
			return err
		}
		o.ObserveInt64(m.pending, s.Pending, m.attrs)
		o.ObserveInt64(m.failing, s.Failing, m.attrs)
		o.ObserveInt64(m.deadG, s.Dead, m.attrs)
		o.ObserveFloat64(m.oldest, s.OldestPending.Seconds(), m.attrs)
		o.ObserveInt64(m.scheduled, s.Scheduled, m.attrs)
		o.ObserveFloat64(m.nextScheduled, s.NextScheduled.Seconds(), m.attrs)
		o.ObserveFloat64(m.overdue, s.Overdue.Seconds(), m.attrs)
		if st.Storage {
			o.ObserveInt64(m.deadTuples, s.DeadTuples, m.attrs)
			o.ObserveInt64(m.size, s.TableBytes, m.attrs)
		}
		if s.OldestTransactionKnown {
			o.ObserveFloat64(m.oldestXact, s.OldestTransactionAge.Seconds(), m.attrs)
		}
		return nil
	}, gauges...)
	if err != nil {
		r.log.Warn("relay: cannot observe the outbox gauges", "err", err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}
