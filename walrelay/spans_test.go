package walrelay_test

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/heraldgo/herald/walrelay"
)

// spanNames is a TracerProvider that records the names of the spans started.
type spanNames struct {
	noop.TracerProvider
	mu    sync.Mutex
	names []string
}

func (p *spanNames) Tracer(string, ...trace.TracerOption) trace.Tracer { return spanTracer{p: p} }

func (p *spanNames) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.names...)
}

type spanTracer struct {
	noop.Tracer
	p *spanNames
}

func (t spanTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	t.p.mu.Lock()
	t.p.names = append(t.p.names, name)
	t.p.mu.Unlock()
	return noop.Tracer{}.Start(ctx, name, opts...)
}

// The WAL relay publishes each event in a producer span, as the table relay
// does (the publish call is the same code: internal/outbound).
func TestPublishSpans(t *testing.T) {
	for name, batch := range kinds {
		t.Run(name, func(t *testing.T) {
			db, rs := setupAggs(t)
			gc := ordered()
			c := collect(t, gc)
			tp := &spanNames{}
			r := rs.with(t, publisher(newRecorder(t, gc, false), batch), walrelay.Config{TracerProvider: tp, MessagingSystem: "test"})
			start(t, r)
			for n := range 3 {
				save(t, db, "a1", n, false)
			}
			waitFor(t, "the events", func() bool { return len(c.deliveries()) == 3 })
			publish := 0
			for _, n := range tp.all() {
				if n == "publish "+steps {
					publish++
				}
			}
			if publish < 3 {
				t.Fatalf("%d producer spans for 3 events; spans %v", publish, tp.all())
			}
		})
	}
}
