package outboxhook_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/outboxhook"
)

// The trace context of the saving request is stored with each event, as W3C
// traceparent/tracestate metadata; without a span nothing is added.
func TestTraceContextStored(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	ts, err := trace.ParseTraceState("vendor=abc")
	must(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	const want = "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
	must(t, db.WithContext(ctx).Create(NewOrder()).Error)
	must(t, outboxhook.Add(db.WithContext(ctx), DocEvent{}))
	copied := message.NewMessage(uuid.NewString(), []byte(`{}`))
	copied.Metadata.Set(events.MetaTraceParent, "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01")
	must(t, db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return outboxhook.AddMessages(tx, "t", copied) }))
	must(t, db.Create(NewOrder()).Error) // no span
	rows := outbox(t, db)
	for i, r := range rows {
		var md events.Metadata
		must(t, json.Unmarshal([]byte(r.Metadata), &md))
		if i < 3 && (md[events.MetaTraceParent] != want || md[events.MetaTraceState] != "vendor=abc") {
			t.Fatalf("row %d metadata = %v", i, md)
		}
		if i == 3 && len(md) != 0 {
			t.Fatalf("metadata without a span = %v", md)
		}
	}
}
