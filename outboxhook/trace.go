package outboxhook

import (
	"context"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/telemetry"
)

// traceMetadata returns the W3C trace context (events.MetaTraceParent and
// events.MetaTraceState) of the span ctx carries, or nil when it carries none:
// with tracing off, an event costs one context lookup more.
func traceMetadata(ctx context.Context) events.Metadata {
	if !telemetry.HasSpan(ctx) {
		return nil
	}
	md := events.Metadata{}
	telemetry.Inject(ctx, md)
	return md
}

// contextMetadata is the metadata a statement run with ctx stores with its
// events: the trace context of the saving request, overlaid with what
// events.WithMetadata attached (metadata given at record time wins over both).
func contextMetadata(ctx context.Context) events.Metadata {
	return traceMetadata(ctx).Merge(events.MetadataFromContext(ctx))
}
