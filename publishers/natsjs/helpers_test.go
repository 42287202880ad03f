package natsjs_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/publishers/natsjs"
)

// natsURL is the shared NATS server with JetStream (HERALD_TEST_NATS_URL
// overrides).
func natsURL() string {
	if v := os.Getenv("HERALD_TEST_NATS_URL"); v != "" {
		return v
	}
	return "nats://127.0.0.1:4222"
}

var seq atomic.Int64

// newTopic returns a topic (and stream name) of this test's own; its stream
// is deleted when the test ends.
func newTopic(t testing.TB, prefix string) string {
	t.Helper()
	topic := fmt.Sprintf("herald_natsjs_%s_%d_%d_%d", prefix, os.Getpid(), time.Now().UnixNano(), seq.Add(1))
	t.Cleanup(func() { deleteStreams(topic) })
	return topic
}

// deleteStreams removes JetStream streams, ignoring errors.
func deleteStreams(names ...string) {
	nc, err := nats.Connect(natsURL(), nats.Timeout(2*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, n := range names {
		_ = js.DeleteStream(ctx, n)
	}
}

// js is a JetStream client of the test's own, closed when it ends.
func js(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(natsURL())
	if err != nil {
		t.Fatalf("connect to %s: %v", natsURL(), err)
	}
	t.Cleanup(nc.Close)
	j, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, j
}

// streamMsgs is how many messages the stream holds.
func streamMsgs(t testing.TB, j jetstream.JetStream, stream string) uint64 {
	t.Helper()
	s, err := j.Stream(context.Background(), stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	return info.State.Msgs
}

// newPublisher returns a Publisher on the shared server, provisioning
// streams, closed when the test ends.
func newPublisher(t testing.TB, cfg natsjs.Config) *natsjs.Publisher {
	t.Helper()
	if cfg.URL == "" && cfg.Conn == nil {
		cfg.URL = natsURL()
	}
	if cfg.Logger == nil {
		cfg.Logger = testkit.Quiet()
	}
	p, err := natsjs.New(cfg)
	if err != nil {
		t.Fatalf("natsjs.New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// subscriberConfig is a durable watermill-nats JetStream subscriber, as
// Herald's examples configure it (examples/internal/brokertest), reading
// the stream from its start, NATSMarshaler as its Unmarshaler.
func subscriberConfig(durable string) wmnats.SubscriberConfig {
	return wmnats.SubscriberConfig{
		URL:              natsURL(),
		QueueGroupPrefix: durable,
		SubscribersCount: 1,
		AckWaitTimeout:   5 * time.Second,
		CloseTimeout:     5 * time.Second,
		Unmarshaler:      &wmnats.NATSMarshaler{},
		JetStream: wmnats.JetStreamConfig{
			AutoProvision:    true,
			DurablePrefix:    durable,
			SubscribeOptions: []nats.SubOpt{nats.DeliverAll(), nats.AckExplicit(), nats.ManualAck(), nats.AckWait(5 * time.Second)},
		},
	}
}

// subscribe records what a watermill-nats subscriber receives on topic until
// the test ends.
func subscribe(t testing.TB, topic string) *testkit.Received {
	t.Helper()
	sub, err := wmnats.NewSubscriber(subscriberConfig("herald_natsjs_test"), watermill.NopLogger{})
	if err != nil {
		t.Fatalf("watermill-nats subscriber: %v", err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return testkit.Consume(t, sub, topic)
}

// watermillPublisher is watermill-nats' JetStream publisher as Herald's
// examples configure it, closed when the test ends.
func watermillPublisher(t testing.TB) message.Publisher {
	t.Helper()
	pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{
		URL:       natsURL(),
		Marshaler: &wmnats.NATSMarshaler{},
		JetStream: wmnats.JetStreamConfig{AutoProvision: true, TrackMsgId: true},
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("watermill-nats publisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// newMessages returns n messages with a UUID, a payload and metadata.
func newMessages(n int) []*message.Message {
	out := make([]*message.Message, n)
	for i := range out {
		m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"n":%d}`, i))
		m.Metadata.Set("herald_type", "test.event")
		m.Metadata.Set("n", fmt.Sprint(i))
		out[i] = m
	}
	return out
}
