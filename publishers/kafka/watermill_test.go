package kafka_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/publishers/kafka"
)

// watermill-kafka's subscriber reads what the publisher wrote: the UUID and
// the metadata arrive as from watermill-kafka's own publisher.
func TestWatermillSubscriberReads(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	pub := newPublisher(t, c)
	sent := map[string]*message.Message{}
	var msgs []*message.Message
	for i := range 20 {
		m := msg("agg", i)
		m.Metadata.Set("tenant", "acme")
		sent[m.UUID] = m
		msgs = append(msgs, m)
	}
	for i, err := range pub.PublishBatch(context.Background(), "orders", msgs...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}

	scfg := wmkafka.DefaultSaramaSubscriberConfig()
	scfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers: c.ListenAddrs(), Unmarshaler: wmkafka.DefaultMarshaler{},
		OverwriteSaramaConfig: scfg, ConsumerGroup: "herald-test",
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for len(sent) > 0 {
		select {
		case got := <-ch:
			want, ok := sent[got.UUID]
			if !ok {
				t.Fatalf("unexpected message %s", got.UUID)
			}
			if string(got.Payload) != string(want.Payload) || !maps.Equal(got.Metadata, want.Metadata) {
				t.Fatalf("message %s: payload %q metadata %v, want %q %v", got.UUID, got.Payload, got.Metadata, want.Payload, want.Metadata)
			}
			got.Ack()
			delete(sent, got.UUID)
		case <-ctx.Done():
			t.Fatalf("%d messages not received", len(sent))
		}
	}
}

// The same message published by watermill-kafka's publisher (with the
// DefaultMarshaler, in a Sarama config safe for an outbox) and by this one
// makes records with the same headers and value.
func TestSameRecordAsWatermillPublisher(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "theirs", "ours")
	pcfg := wmkafka.DefaultSaramaSyncPublisherConfig()
	pcfg.Version = sarama.V2_8_0_0
	pcfg.Producer.RequiredAcks = sarama.WaitForAll
	pcfg.Producer.Idempotent = true
	pcfg.Net.MaxOpenRequests = 1
	theirs, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{
		Brokers: c.ListenAddrs(), Marshaler: wmkafka.DefaultMarshaler{}, OverwriteSaramaConfig: pcfg,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = theirs.Close() })
	ours := newPublisher(t, c)

	m := msg("agg", 7)
	m.Metadata.Set("tenant", "acme")
	if err := theirs.Publish("theirs", m.Copy()); err != nil {
		t.Fatal(err)
	}
	if err := ours.Publish("ours", m.Copy()); err != nil {
		t.Fatal(err)
	}
	headers := func(topic string) (map[string]string, string) {
		r := consume(t, c, topic, 1, 10*time.Second)[0]
		if r.Headers[0].Key != kafka.UUIDHeaderKey {
			t.Errorf("%s: first header %s", topic, r.Headers[0].Key)
		}
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		if len(h) != len(r.Headers) {
			t.Errorf("%s: a header repeated", topic)
		}
		return h, string(r.Value)
	}
	th, tv := headers("theirs")
	oh, ov := headers("ours")
	if !maps.Equal(th, oh) || tv != ov {
		t.Fatalf("watermill-kafka wrote %v %q, this publisher %v %q", th, tv, oh, ov)
	}
	if oh[kafka.UUIDHeaderKey] != m.UUID || oh[events.MetaAggregateID] != "agg" {
		t.Fatalf("headers %v", oh)
	}
}
