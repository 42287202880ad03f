package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/telemetry"
	"github.com/heraldgo/herald/internal/testkit"
)

// BenchmarkPublishBatch measures the relay's own work on a claimed batch of
// 1,000 events (messages built, spans started, published to a publisher that
// keeps nothing), without a database: the CPU a batch costs next to its SQL.
func BenchmarkPublishBatch(b *testing.B) {
	claimed := make([]store.Row, 1000)
	for i := range claimed {
		claimed[i] = store.Row{ID: uuid.NewString(), Seq: int64(i + 1), Type: "bench.event", Version: 1,
			AggregateType: "Bench", AggregateID: fmt.Sprintf("agg-%d", i), Topic: "bench",
			Payload: []byte(fmt.Sprintf(`{"i":%d,"pad":"%0100d"}`, i, 0)), Metadata: []byte(`{}`), OccurredAt: time.Now()}
	}
	keepNothing := testkit.PublisherFunc(func(string, ...*message.Message) error { return nil })
	r := &Relay{pub: keepNothing, caller: outbound.NewCaller(keepNothing, time.Minute, telemetry.Tracer(nil), "")}
	r.cfg.PublishConcurrency, r.cfg.PublishTimeout = 4, time.Minute
	b.ReportAllocs()
	for b.Loop() {
		r.publishUnordered(context.Background(), toRows(claimed, ""))
	}
}
