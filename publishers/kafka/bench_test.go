package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/publishers/kafka"
)

// The benchmarks publish benchEvents messages per iteration against kfake
// (in-process, three brokers, four partitions): figures of the client and this machine, not of a
// Kafka cluster.
const (
	benchEvents = 100_000
	benchCall   = 1_000
)

// benchMessages is n messages as the relay builds them, over 1,000
// aggregates.
func benchMessages(n int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = msg("agg-"+strconv.Itoa(i%1000), i)
	}
	return msgs
}

// BenchmarkPublishBatch publishes 100,000 messages in PublishBatch calls of
// 1,000, one call after the other, as one relay worker does.
func BenchmarkPublishBatch(b *testing.B) {
	c := newCluster(b, "bench")
	pub := newPublisher(b, c)
	msgs := benchMessages(benchEvents)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		for i := 0; i < len(msgs); i += benchCall {
			for _, err := range pub.PublishBatch(ctx, "bench", msgs[i:i+benchCall]...) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPublishBatchConcurrent publishes the same 100,000 messages in
// calls of 1,000 from 8 goroutines at once, as the relay's workers do with
// its default PublishConcurrency.
func BenchmarkPublishBatchConcurrent(b *testing.B) {
	c := newCluster(b, "bench")
	pub := newPublisher(b, c)
	msgs := benchMessages(benchEvents)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		calls := make(chan []*message.Message)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for call := range calls {
					for _, err := range pub.PublishBatch(ctx, "bench", call...) {
						if err != nil {
							b.Error(err)
						}
					}
				}
			})
		}
		for i := 0; i < len(msgs); i += benchCall {
			calls <- msgs[i : i+benchCall]
		}
		close(calls)
		wg.Wait()
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkBrokerReference produces the same records directly with franz-go,
// with the publisher's settings (idempotent, acks=all, no linger), all
// pipelined: every record handed over at once, a promise each, then waited
// for. No Herald, no Watermill.
func BenchmarkBrokerReference(b *testing.B) {
	c := newCluster(b, "bench")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	msgs := benchMessages(benchEvents)
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		h := []kgo.RecordHeader{{Key: kafka.UUIDHeaderKey, Value: []byte(m.UUID)}}
		for k, v := range m.Metadata {
			h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		recs[i] = &kgo.Record{Key: []byte(m.Metadata["herald_aggregate_id"]), Value: m.Payload, Headers: h}
	}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			failed error
		)
		wg.Add(len(recs))
		for _, r := range recs {
			r := &kgo.Record{Topic: "bench", Key: r.Key, Value: r.Value, Headers: r.Headers}
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
				wg.Done()
			})
		}
		wg.Wait()
		if failed != nil {
			b.Fatal(failed)
		}
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}
