package fleet

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/heraldgo/herald/internal/telemetry"
)

// observe registers the fleet's gauges, read from its state at each
// collection, for the time Run runs; the returned function unregisters
// them. A gauge that cannot be made leaves the fleet without metrics: they
// never stop it.
func (f *Fleet) observe() func() {
	mp := f.cfg.Relay.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(telemetry.ScopeName)
	tenants, err := meter.Int64ObservableGauge("herald.fleet.tenants", metric.WithUnit("{tenant}"),
		metric.WithDescription("The fleet's tenants, by state: idle, probing, queued, active, failing, elsewhere (served by another member)."))
	if err != nil {
		return func() {}
	}
	conns, err := meter.Int64ObservableGauge("herald.fleet.connections", metric.WithUnit("{connection}"),
		metric.WithDescription("Database connections the fleet holds of its budget (MaxConns)."))
	if err != nil {
		return func() {}
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f.mu.Lock()
		var n [len(stateNames)]int64
		for _, t := range f.tenants {
			n[t.st]++
		}
		f.mu.Unlock()
		for s, c := range n {
			o.ObserveInt64(tenants, c, metric.WithAttributes(attribute.String("state", state(s).String())))
		}
		o.ObserveInt64(conns, int64(f.conns.used()))
		return nil
	}, tenants, conns)
	if err != nil {
		f.log.Warn("fleet: cannot observe the fleet's gauges", "err", err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}
