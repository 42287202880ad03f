package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	promclient "github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// One trace from a request through the save, the relay's publish and the
// consumer's handler, across each real broker: the request's span is the
// parent of the producer span, which is the parent of the consumer span, and
// the handler's context carries the consumer span.
func TestOneTraceFromRequestToConsumer(t *testing.T) {
	for name, connect := range brokertest.Brokers() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

			topic := brokertest.Topic("trace")
			e := newTopicEnv(t, testkit.Postgres, topic)
			pub, sub := connect(t, topic)
			r, err := relay.New(e.db, pub, relay.Config{PollInterval: 50 * time.Millisecond, Logger: quietLogger(),
				TracerProvider: tp, MessagingSystem: name})
			testkit.Must(t, err)
			e.run(r)
			in, err := inbox.New(e.db, inbox.Config{TracerProvider: tp, MessagingSystem: name, Logger: quietLogger()})
			testkit.Must(t, err)
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			testkit.Must(t, err)
			router.AddMiddleware(in.Middleware)
			handled := make(chan trace.SpanContext, 1)
			router.AddConsumerHandler("ledger", topic, sub, func(msg *message.Message) error {
				handled <- trace.SpanContextFromContext(msg.Context())
				return nil
			})
			runRouter(t, router)

			ctx, request := tp.Tracer("test").Start(context.Background(), "POST /accounts")
			a := &Account{ID: uuid.New()}
			a.Record(Deposited{AccountID: a.ID})
			eventID := a.Records()[0].ID.String()
			testkit.Must(t, e.db.WithContext(ctx).Create(a).Error)
			request.End()

			var inHandler trace.SpanContext
			select {
			case inHandler = <-handled:
			case <-time.After(30 * time.Second):
				t.Fatal("the event did not reach the handler")
			}
			traceID := request.SpanContext().TraceID()
			if inHandler.TraceID() != traceID {
				t.Fatalf("the handler runs in trace %s, the request was %s", inHandler.TraceID(), traceID)
			}
			var publish, process sdktrace.ReadOnlySpan
			testkit.Eventually(t, 5*time.Second, "the consumer span ended", func() bool {
				publish, process = nil, nil
				for _, s := range spans.GetSpans().Snapshots() {
					switch {
					case s.Name() == "publish "+topic && s.SpanContext().TraceID() == traceID:
						publish = s
					case s.Name() == "process "+topic && s.SpanContext().TraceID() == traceID:
						process = s
					}
				}
				return publish != nil && process != nil
			})
			if publish.Parent().SpanID() != request.SpanContext().SpanID() || publish.SpanKind() != trace.SpanKindProducer {
				t.Fatalf("publish span: parent %s (request %s), kind %v", publish.Parent().SpanID(), request.SpanContext().SpanID(), publish.SpanKind())
			}
			if process.Parent().SpanID() != publish.SpanContext().SpanID() || process.SpanKind() != trace.SpanKindConsumer {
				t.Fatalf("process span: parent %s (publish %s), kind %v", process.Parent().SpanID(), publish.SpanContext().SpanID(), process.SpanKind())
			}
			if inHandler.SpanID() != process.SpanContext().SpanID() {
				t.Fatal("the handler's context does not carry the consumer span")
			}
			want := map[string]string{"messaging.system": name, "messaging.destination.name": topic, "messaging.message.id": eventID}
			for _, s := range []sdktrace.ReadOnlySpan{publish, process} {
				got := map[string]string{}
				for _, kv := range s.Attributes() {
					got[string(kv.Key)] = kv.Value.String()
				}
				for k, v := range want {
					if got[k] != v {
						t.Fatalf("%s: %s = %q, want %q", s.Name(), k, got[k], v)
					}
				}
			}
		})
	}
}

// The relay's metrics, read through OpenTelemetry's Prometheus exporter, have
// the names the Grafana dashboard and the alert rules use.
func TestMetricsThroughPrometheusExporter(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		reg := promclient.NewRegistry()
		exporter, err := prometheus.New(prometheus.WithRegisterer(reg), prometheus.WithoutScopeInfo())
		testkit.Must(t, err)
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

		e := newTopicEnv(t, d, "account.deposited")
		refuse := &refusing{Publisher: gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), topic: "never"}
		r, err := relay.New(e.db, refuse, relay.Config{PollInterval: 50 * time.Millisecond, MinBackoff: time.Hour, MaxBackoff: time.Hour,
			Logger: quietLogger(), MeterProvider: mp})
		testkit.Must(t, err)
		e.write(3, 1)
		testkit.Must(t, outboxhook.Add(e.db, Deposited{})) // this one's topic is refused below
		testkit.Must(t, e.db.Exec(`UPDATE outbox_messages SET topic = 'never' WHERE aggregate_id = ''`).Error)
		e.run(r)
		testkit.Eventually(t, 10*time.Second, "3 published, 1 failing", func() bool {
			s, err := r.Stats(context.Background())
			return err == nil && s.Published == 3 && s.Failing == 1
		})
		values := map[string]float64{}
		mfs, err := reg.Gather()
		testkit.Must(t, err)
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch {
				case m.GetCounter() != nil:
					values[mf.GetName()] = m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					values[mf.GetName()] = m.GetGauge().GetValue()
				case m.GetHistogram() != nil:
					values[mf.GetName()] = float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
		for name, want := range map[string]float64{
			"herald_relay_published_total": 3, "herald_relay_failed_total": -1, "herald_outbox_pending": 1,
			"herald_outbox_failing": 1, "herald_outbox_dead": 0, "herald_outbox_oldest_pending_age_seconds": -1,
			"herald_relay_publish_duration_seconds": -1,
		} {
			got, ok := values[name]
			if !ok {
				t.Fatalf("no %s among %v", name, keys(values))
			}
			if want >= 0 && got != want {
				t.Fatalf("%s = %v, want %v", name, got, want)
			}
		}
	})
}

// refusing refuses one topic and publishes the others.
type refusing struct {
	message.Publisher
	topic string
}

func (p *refusing) Publish(topic string, msgs ...*message.Message) error {
	if topic == p.topic {
		return errRefused
	}
	return p.Publisher.Publish(topic, msgs...)
}

var errRefused = errorString("topic refused")

type errorString string

func (e errorString) Error() string { return string(e) }

func keys(m map[string]float64) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return strings.Join(out, ", ")
}
