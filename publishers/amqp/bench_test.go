package amqp_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/publishers/amqp"
)

// benchMessages is how many messages one iteration publishes
// (HERALD_BENCH_AMQP_N overrides 100,000), in calls of benchCall.
func benchMessages(b *testing.B) int {
	if v := os.Getenv("HERALD_BENCH_AMQP_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	return 100_000
}

const benchCall = 1000

// benchBatch is messages shaped like the relay's: a JSON payload and the
// Herald metadata keys.
func benchBatch(n int) []*message.Message {
	out := make([]*message.Message, n)
	for i := range out {
		id := watermill.NewUUID()
		m := message.NewMessage(id, []byte(`{"AccountID":"5b0c1e2a-7d8f-4b1e-9c3a-2f6d8e4a1b7c","Seq":`+strconv.Itoa(i)+`}`))
		m.Metadata = message.Metadata{"herald_id": id, "herald_type": "account.deposited", "herald_version": "1",
			"herald_aggregate_type": "account", "herald_aggregate_id": "5b0c1e2a-7d8f-4b1e-9c3a-2f6d8e4a1b7c",
			"herald_occurred_at": time.Now().UTC().Format(time.RFC3339Nano)}
		out[i] = m
	}
	return out
}

// BenchmarkPublishBatch publishes 100,000 messages (one iteration) to a
// durable fanout exchange with a durable queue bound, in calls of 1,000:
// through this Publisher's PublishBatch (one call at a time, and four at
// once as the relay's PublishConcurrency makes them), and through watermill-amqp's
// publisher (the durable pub/sub config) with ConfirmDelivery on (safe: one
// confirm awaited at a time) and off (unsafe for an outbox). The queue is
// purged between iterations, outside the timer. msgs/s is the figure.
//
//	go test -run '^$' -bench BenchmarkPublishBatch -benchtime 1x ./publishers/amqp/
func BenchmarkPublishBatch(b *testing.B) {
	n := benchMessages(b)
	run := func(b *testing.B, concurrency int, publish func(topic string, msgs []*message.Message) error) {
		topic, queue := name("bench"), name("bench_q")
		topology(b, topic, "fanout", queue, "", nil)
		ch := admin(b)
		msgs := benchBatch(n)
		b.ResetTimer()
		var elapsed time.Duration
		for range b.N {
			start := time.Now()
			calls := make(chan []*message.Message, n/benchCall+1)
			for i := 0; i < n; i += benchCall {
				calls <- msgs[i:min(i+benchCall, n)]
			}
			close(calls)
			var wg sync.WaitGroup
			for range concurrency {
				wg.Go(func() {
					for call := range calls {
						if err := publish(topic, call); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed += time.Since(start)
			b.StopTimer()
			if _, err := ch.QueuePurge(queue, false); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "msgs/s")
	}
	for _, concurrency := range []int{1, 4} {
		b.Run("herald/calls="+strconv.Itoa(concurrency), func(b *testing.B) {
			p := newPublisher(b, amqp.Config{MaxInFlight: 1024 * concurrency})
			run(b, concurrency, func(topic string, msgs []*message.Message) error {
				for _, err := range p.PublishBatch(context.Background(), topic, msgs...) {
					if err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	for _, confirm := range []bool{true, false} {
		b.Run("watermill-amqp/confirm="+strconv.FormatBool(confirm), func(b *testing.B) {
			cfg := wmamqp.NewDurablePubSubConfig(url(), nil)
			cfg.Publish.ConfirmDelivery = confirm
			p, err := wmamqp.NewPublisher(cfg, watermill.NopLogger{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = p.Close() })
			run(b, 1, func(topic string, msgs []*message.Message) error { return p.Publish(topic, msgs...) })
		})
	}
}
