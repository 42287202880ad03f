package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/publishers/natsjs"
)

// BenchmarkPublishBatch publishes 100,000 messages per iteration, in calls of
// 1,000, to a stream of the benchmark's own on the real server: through
// PublishBatch (pipelined, MaxInFlight 1024), and through watermill-nats'
// JetStream publisher (TrackMsgId, one ack awaited per message) for
// comparison. msgs/s is the figure to compare. Run it alone:
//
//	go test -run '^$' -bench BenchmarkPublishBatch -benchtime 3x ./publishers/natsjs/
func BenchmarkPublishBatch(b *testing.B) {
	const total, call = 100_000, 1_000
	run := func(b *testing.B, publish func(topic string, msgs []*message.Message) error) {
		topic := newTopic(b, "bench")
		msgs := newMessages(total)
		if err := publish(topic, msgs[:1]); err != nil { // the stream, provisioned before the clock starts
			b.Fatal(err)
		}
		var took time.Duration
		for b.Loop() {
			for _, m := range msgs {
				m.UUID = watermill.NewUUID() // new events each round: no duplicate dropped
			}
			start := time.Now()
			for i := 0; i < total; i += call {
				if err := publish(topic, msgs[i:i+call]); err != nil {
					b.Fatal(err)
				}
			}
			took += time.Since(start)
		}
		b.ReportMetric(float64(b.N*total)/took.Seconds(), "msgs/s")
	}
	b.Run("natsjs", func(b *testing.B) {
		p := newPublisher(b, natsjs.Config{AutoProvision: true})
		run(b, func(topic string, msgs []*message.Message) error {
			for _, err := range p.PublishBatch(context.Background(), topic, msgs...) {
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run("watermill-nats", func(b *testing.B) {
		p := watermillPublisher(b)
		run(b, func(topic string, msgs []*message.Message) error { return p.Publish(topic, msgs...) })
	})
}
