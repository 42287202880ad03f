package outbound

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Instruments are a relay's publish metrics, made here for both relays so
// that they mean the same: <prefix>.published (events the publisher
// acknowledged), <prefix>.failed (failed attempts, one per event per
// attempt) and <prefix>.publish.duration (seconds a publish took), each
// recorded with the relay's attributes. An instrument that cannot be made is
// left nil and not recorded: metrics never stop a relay (the errors are
// those of a misconfigured SDK).
type Instruments struct {
	attrs             metric.MeasurementOption
	published, failed metric.Int64Counter
	duration          metric.Float64Histogram
}

// NewInstruments makes the instruments named after prefix ("herald.relay",
// "herald.wal") on m; took says what one duration measures.
func NewInstruments(m metric.Meter, prefix, took string, attrs metric.MeasurementOption) *Instruments {
	in := &Instruments{attrs: attrs}
	in.published, _ = m.Int64Counter(prefix+".published", metric.WithUnit("{event}"),
		metric.WithDescription("Events the relay published (the publisher acknowledged them)."))
	in.failed, _ = m.Int64Counter(prefix+".failed", metric.WithUnit("{attempt}"),
		metric.WithDescription("Failed publish attempts of the relay, one per event per failed attempt."))
	in.duration, _ = m.Float64Histogram(prefix+".publish.duration", metric.WithUnit("s"),
		metric.WithDescription(took),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1, 2, 4, 8, 16))
	return in
}

// Record records one publish: how long it took, how many of its events were
// published and how many failed.
func (in *Instruments) Record(took time.Duration, ok, failed int) {
	if in.duration != nil {
		in.duration.Record(context.Background(), took.Seconds(), in.attrs)
	}
	in.Add(in.published, ok)
	in.Add(in.failed, failed)
}

// Add adds n (when positive) to ctr, one of the relay's own counters made on
// the same meter, with the relay's attributes.
func (in *Instruments) Add(ctr metric.Int64Counter, n int) {
	if ctr != nil && n > 0 {
		ctr.Add(context.Background(), int64(n), in.attrs)
	}
}
