package walrelay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/telemetry"
)

// ObserveSlot makes the gauges of the replication slot slot, read from db
// (ReadSlot, with a 5 s timeout) at each collection of mp (nil: the global
// provider, a no-op until the application installs an SDK), all with a slot
// attribute:
//
//   - herald.wal.slot.lag (bytes): SlotStatus.LagBytes, the WAL written
//     since the relay's last confirmed position;
//   - herald.wal.slot.retained (bytes): SlotStatus.RetainedBytes, the WAL
//     the server keeps for the slot;
//   - herald.wal.slot.age (seconds): SlotStatus.AgeSeconds, the time since
//     the relay streaming the slot last reported its position; not observed
//     while no relay streams it;
//   - herald.wal.slot.active: 1 while a relay streams the slot, else 0;
//   - herald.wal.slot.usable: 1 when the slot exists and is usable
//     (SlotStatus.Problem is nil), else 0 (missing or invalidated).
//
// Through OpenTelemetry's Prometheus exporter they read
// herald_wal_slot_lag_bytes, herald_wal_slot_retained_bytes,
// herald_wal_slot_age_seconds, herald_wal_slot_active and
// herald_wal_slot_usable. Call it once per process and slot, in the relay's
// process or any other (the figures are the server's); stop unregisters
// the gauges.
func ObserveSlot(db *sql.DB, slot string, mp metric.MeterProvider) (stop func(), err error) {
	if db == nil {
		return nil, errors.New("walrelay: observe slot: nil db")
	}
	if !name.MatchString(slot) {
		return nil, fmt.Errorf("walrelay: observe slot: invalid slot %q", slot)
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(telemetry.ScopeName)
	lag, err1 := m.Int64ObservableGauge("herald.wal.slot.lag", metric.WithUnit("By"),
		metric.WithDescription("WAL written since the position the WAL relay last confirmed (pg_current_wal_lsn() - confirmed_flush_lsn)."))
	retained, err2 := m.Int64ObservableGauge("herald.wal.slot.retained", metric.WithUnit("By"),
		metric.WithDescription("WAL the server keeps for the WAL relay's slot (pg_current_wal_lsn() - restart_lsn)."))
	age, err3 := m.Float64ObservableGauge("herald.wal.slot.age", metric.WithUnit("s"),
		metric.WithDescription("Time since the WAL relay streaming the slot last reported its position (now() - reply_time); absent while none streams it."))
	active, err4 := m.Int64ObservableGauge("herald.wal.slot.active",
		metric.WithDescription("1 while a WAL relay streams the slot, else 0."))
	usable, err5 := m.Int64ObservableGauge("herald.wal.slot.usable",
		metric.WithDescription("1 when the slot exists and is usable, 0 when it is missing or invalidated."))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return nil, fmt.Errorf("walrelay: observe slot: %w", err)
	}
	attrs := metric.WithAttributes(attribute.String("slot", slot))
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := ReadSlot(ctx, db, slot)
		if err != nil {
			return err
		}
		o.ObserveInt64(lag, s.LagBytes, attrs)
		o.ObserveInt64(retained, s.RetainedBytes, attrs)
		if a, ok := s.Age(); ok {
			o.ObserveFloat64(age, a.Seconds(), attrs)
		}
		o.ObserveInt64(active, boolInt(s.Active), attrs)
		o.ObserveInt64(usable, boolInt(s.Problem() == nil), attrs)
		return nil
	}, lag, retained, age, active, usable)
	if err != nil {
		return nil, fmt.Errorf("walrelay: observe slot: %w", err)
	}
	return func() { _ = reg.Unregister() }, nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// counters are the relay's publish metrics (Config.MeterProvider): the
// publish call's, shared with the table relay (outbound.Instruments, named
// herald.wal.*), and the events parked.
type counters struct {
	*outbound.Instruments
	park metric.Int64Counter
}

func newCounters(mp metric.MeterProvider, slot string) *counters {
	m := mp.Meter(telemetry.ScopeName)
	c := &counters{Instruments: outbound.NewInstruments(m, "herald.wal",
		"Time of one publish call of the WAL relay (Publish or PublishBatch, one or more events).",
		metric.WithAttributes(attribute.String("slot", slot)))}
	// Left nil, and not recorded, if it cannot be made (see outbound.Instruments).
	c.park, _ = m.Int64Counter("herald.wal.parked", metric.WithUnit("{event}"),
		metric.WithDescription("Events the WAL relay parked in the outbox table: refused, or behind a refused one of their aggregate."))
	return c
}

// call records one publish call: how long it took, how many of its events
// were published and how many failed.
func (c *counters) call(took time.Duration, ok, failed int) { c.Record(took, ok, failed) }

// parked counts events written to the outbox table.
func (c *counters) parked(n int) { c.Add(c.park, n) }
