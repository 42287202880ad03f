// Package telemetry owns how Herald traces: the W3C trace context carried in
// event and message metadata, the tracer, and the messaging semantic
// conventions of its spans. The outbox hook stores the saving request's trace
// context with each event; the relay publishes each event in a producer span
// parented to it and injects the span into the message; the inbox extracts it
// and runs the handler in a consumer span. Herald uses the OpenTelemetry API
// only: the application brings the SDK (with none, every span is a no-op).
package telemetry

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of Herald's tracers and meters.
const ScopeName = "github.com/heraldgo/herald"

// propagator is W3C Trace Context: traceparent and tracestate, the keys
// events.MetaTraceParent and events.MetaTraceState.
var propagator = propagation.TraceContext{}

// HasSpan reports whether ctx carries a valid span context.
func HasSpan(ctx context.Context) bool { return trace.SpanContextFromContext(ctx).IsValid() }

// Inject writes the trace context of the span ctx carries into md; nothing when
// it carries none.
func Inject(ctx context.Context, md map[string]string) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagator.Inject(ctx, propagation.MapCarrier(md))
	}
}

// Extract returns ctx carrying the remote span context md holds, if any.
func Extract(ctx context.Context, md map[string]string) context.Context {
	if md["traceparent"] == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(md))
}

// Tracer returns Herald's tracer from tp, or from the global provider when tp
// is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// Messaging is the messaging attributes of a span: the system (e.g. "nats",
// "rabbitmq"; empty leaves it out), the destination (topic) and the message id
// (the event id).
func Messaging(system, destination, messageID string, more ...attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 3+len(more))
	if system != "" {
		attrs = append(attrs, semconv.MessagingSystemKey.String(system))
	}
	attrs = append(attrs, semconv.MessagingDestinationName(destination), semconv.MessagingMessageID(messageID))
	return append(attrs, more...)
}

// producer and consumer are the span kinds' start options, made once.
var (
	producer = trace.WithSpanKind(trace.SpanKindProducer)
	consumer = trace.WithSpanKind(trace.SpanKindConsumer)
)

// StartPublish starts the producer span of one event's publish, parented to
// parent (the saving request's context, from the event's metadata).
func StartPublish(parent context.Context, tr trace.Tracer, system, topic, id string) (context.Context, trace.Span) {
	attrs := Messaging(system, topic, id, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("publish"))
	return tr.Start(parent, "publish "+topic, producer, trace.WithAttributes(attrs...))
}

// StartProcess starts the consumer span of a handler processing one message,
// parented to the producer span the message carries.
func StartProcess(parent context.Context, tr trace.Tracer, system, topic, id, group string) (context.Context, trace.Span) {
	attrs := Messaging(system, topic, id, semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"), semconv.MessagingConsumerGroupName(group))
	return tr.Start(parent, "process "+topic, consumer, trace.WithAttributes(attrs...))
}

// End ends span, recording err (if any) as its status.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
