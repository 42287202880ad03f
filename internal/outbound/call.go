package outbound

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldgo/herald/internal/telemetry"
	"github.com/heraldgo/herald/publish"
)

// Caller makes a relay's publish calls to one publisher.
type Caller struct {
	pub     message.Publisher
	batch   publish.BatchPublisher // pub, when it is one
	timeout time.Duration
	tracer  trace.Tracer
	system  string // the spans' messaging.system
}

// NewCaller returns a Caller of pub whose calls last at most timeout, each
// message in a producer span of tracer with messaging.system system.
func NewCaller(pub message.Publisher, timeout time.Duration, tracer trace.Tracer, system string) *Caller {
	c := &Caller{pub: pub, timeout: timeout, tracer: tracer, system: system}
	c.batch, _ = pub.(publish.BatchPublisher)
	return c
}

// Batch reports whether the publisher is a publish.BatchPublisher, whose
// results are per message.
func (c *Caller) Batch() bool { return c.batch != nil }

// Result is how one publish call ended.
type Result struct {
	// Errs is each message's error, in the order of the call's messages: nil
	// when the broker acknowledged it. A Publish call's error is every
	// message's.
	Errs []error
	// Start and End are when the call began and returned (or was given up
	// on), by this process's monotonic clock.
	Start, End time.Time
}

// Acked reports whether the call acknowledged a message.
func (r Result) Acked() bool {
	for _, err := range r.Errs {
		if err == nil {
			return true
		}
	}
	return false
}

// Call publishes msgs, all for topic, in one call: PublishBatch when the
// publisher is a BatchPublisher (its context done after the timeout), else
// Publish. A panic is an error wrapping publish.ErrPublisherPanic, a call
// that did not return within the timeout one wrapping
// publish.ErrPublishTimeout, and one given up on because ctx is done, ctx's
// error: every message of such a call failed, whatever it returns later. A
// call that never returns keeps its goroutine: nothing can stop it. Each
// message is published in a producer span, parented to the trace context
// its metadata carries (the request that saved it), injected into its
// metadata for the consumer, and ended with the message's result.
func (c *Caller) Call(ctx context.Context, topic string, msgs []*message.Message) Result {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	spans := make([]trace.Span, len(msgs))
	for i, m := range msgs {
		sctx, span := telemetry.StartPublish(telemetry.Extract(pctx, m.Metadata), c.tracer, c.system, topic, m.UUID)
		telemetry.Inject(sctx, m.Metadata)
		m.SetContext(sctx)
		spans[i] = span
	}
	type returned struct {
		err  error   // the call's error: a panic, or Publish's
		errs []error // PublishBatch's results
	}
	done := make(chan returned, 1)
	res := Result{Errs: make([]error, len(msgs)), Start: time.Now()}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- returned{err: fmt.Errorf("%w: %v", publish.ErrPublisherPanic, p)}
			}
		}()
		if c.batch != nil {
			done <- returned{errs: c.batch.PublishBatch(pctx, topic, msgs...)}
		} else {
			done <- returned{err: c.pub.Publish(topic, msgs...)}
		}
	}()
	var got returned
	select {
	case got = <-done:
	case <-pctx.Done():
		got = returned{err: fmt.Errorf("%w after %v", publish.ErrPublishTimeout, c.timeout)}
	case <-ctx.Done():
		got = returned{err: ctx.Err()}
	}
	res.End = time.Now()
	if c.batch != nil && got.err == nil && len(got.errs) != len(msgs) {
		got.err = fmt.Errorf("relay: PublishBatch returned %d results for %d messages", len(got.errs), len(msgs))
	}
	if got.err != nil || c.batch == nil {
		for i := range res.Errs {
			res.Errs[i] = got.err
		}
	} else {
		copy(res.Errs, got.errs)
	}
	for i, span := range spans {
		telemetry.End(span, res.Errs[i])
	}
	return res
}

// Refused reports whether err is the broker's refusal of the message itself
// (it wraps publish.ErrRejected): a strike at once. Any other failure is the
// broker's condition until a later call's success confirms it (Evidence).
func Refused(err error) bool { return errors.Is(err, publish.ErrRejected) }
