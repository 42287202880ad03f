package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/publishers/kafka"
	"github.com/heraldgo/herald/relay"
)

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	broker := []string{"localhost:9092"}
	for _, tc := range []struct {
		name string
		cfg  kafka.Config
		want string // in the error
	}{
		{"no brokers", kafka.Config{}, "Brokers is required"},
		{"empty broker", kafka.Config{Brokers: []string{""}}, "empty address"},
		{"nil option", kafka.Config{Brokers: broker, Options: []kgo.Opt{nil}}, "nil option"},
		{"no idempotence", kafka.Config{Brokers: broker, Options: []kgo.Opt{kgo.DisableIdempotentWrite()}}, "DisableIdempotentWrite"},
		{"acks=1", kafka.Config{Brokers: broker, Options: []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck())}}, "RequiredAcks"},
		{"acks=1 idempotent", kafka.Config{Brokers: broker, Options: []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck())}}, "acks=all"}, // franz-go refuses it
		{"one topic always", kafka.Config{Brokers: broker, Options: []kgo.Opt{kgo.DefaultProduceTopic("x"), kgo.DefaultProduceTopicAlways()}}, "DefaultProduceTopicAlways"},
		{"transactional", kafka.Config{Brokers: broker, Options: []kgo.Opt{kgo.TransactionalID("x")}}, "TransactionalID"},
	} {
		pub, err := kafka.New(tc.cfg)
		if err == nil {
			_ = pub.Close()
			t.Errorf("%s: New succeeded", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.want)
		}
	}
	_, err := kafka.New(kafka.Config{Brokers: []string{"localhost:9092"}, Options: []kgo.Opt{kgo.DisableIdempotentWrite()}})
	if !errors.Is(err, kafka.ErrUnsafeOption) {
		t.Errorf("DisableIdempotentWrite: %v, want ErrUnsafeOption", err)
	}
	pub, err := kafka.New(kafka.Config{Brokers: []string{"localhost:9092"}})
	if err != nil {
		t.Fatalf("good config: %v", err)
	}
	_ = pub.Close()
	if err := pub.Publish("t", msg("a", 1)); !errors.Is(err, kafka.ErrClosed) {
		t.Errorf("Publish after Close: %v, want ErrClosed", err)
	}
}

func TestPublishBatchAcked(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	pub := newPublisher(t, c)
	msgs := make([]*message.Message, 500)
	for i := range msgs {
		msgs[i] = msg(fmt.Sprint("agg-", i%17), i)
	}
	errs := pub.PublishBatch(context.Background(), "orders", msgs...)
	if len(errs) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := pub.Publish("orders", msg("x", 0)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got := consume(t, c, "orders", len(msgs)+1, 10*time.Second); len(got) != len(msgs)+1 {
		t.Fatalf("%d records, want %d", len(got), len(msgs)+1)
	}
}

// A produce request that fails in the middle of a window (the brokers'
// condition, UNKNOWN_SERVER_ERROR, which franz-go does not retry) fails
// exactly its records (and, with the idempotent producer, maybe the records
// after them in their partitions), none as its own refusal: every record
// PublishBatch reports acknowledged is in the topic, and every record it
// reports failed is not.
func TestPublishBatchFailureMidWindow(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	// Small batches: the call's records go out in many produce requests.
	pub := newPublisher(t, c, kgo.ProducerBatchMaxBytes(2048))
	seen := failProduce(c, 3, 5, kerr.UnknownServerError)
	msgs := make([]*message.Message, 1000)
	for i := range msgs {
		msgs[i] = msg(fmt.Sprint("agg-", i%50), i)
	}
	errs := pub.PublishBatch(context.Background(), "orders", msgs...)
	if seen.records.Load() == 0 {
		t.Fatalf("%d produce requests: no failure injected", seen.seen.Load())
	}
	acked := map[string]bool{}
	failed := 0
	for i, err := range errs {
		if err == nil {
			acked[msgs[i].UUID] = true
			continue
		}
		failed++
		if !errors.Is(err, kerr.UnknownServerError) || errors.Is(err, relay.ErrRejected) {
			t.Errorf("message %d: %v, want UnknownServerError, not wrapping relay.ErrRejected", i, err)
		}
	}
	if failed == 0 || len(acked) == 0 {
		t.Fatalf("%d failed, %d acked: want some of each", failed, len(acked))
	}
	got := consume(t, c, "orders", len(acked), 10*time.Second)
	stored := map[string]bool{}
	for _, r := range got {
		stored[uuidOf(r)] = true
	}
	if !maps.Equal(stored, acked) {
		t.Fatalf("%d records stored, %d acked: not the same set", len(stored), len(acked))
	}
	t.Logf("the failed produce request held %d records; %d failed in all, %d acked", seen.records.Load(), failed, len(acked))
	// The publisher goes on: the failed messages publish on a retry.
	var retry []*message.Message
	for i, err := range errs {
		if err != nil {
			retry = append(retry, msgs[i])
		}
	}
	for i, err := range pub.PublishBatch(context.Background(), "orders", retry...) {
		if err != nil {
			t.Fatalf("retry %d: %v", i, err)
		}
	}
}

// A message that cannot be sent, or a topic that does not exist (kfake
// creates none), fails those messages only.
func TestPublishBatchRefusedMessages(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	pub := newPublisher(t, c, kgo.UnknownTopicRetries(1))
	bad := msg("a", 1)
	bad.Metadata.Set(kafka.UUIDHeaderKey, "x")
	msgs := []*message.Message{msg("a", 0), bad, msg("b", 0)}
	errs := pub.PublishBatch(context.Background(), "orders", msgs...)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], kafka.ErrReservedMetadata) || !errors.Is(errs[1], relay.ErrRejected) {
		t.Fatalf("results %v, want nil, ErrReservedMetadata, nil", errs)
	}
	for i, err := range pub.PublishBatch(context.Background(), "missing", msg("a", 2), msg("c", 0)) {
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("missing topic, message %d: %v, want UnknownTopicOrPartition", i, err)
		}
	}
	if err := pub.Publish("orders", msg("a", 3)); err != nil {
		t.Fatalf("after the missing topic: %v", err)
	}
}

// A call whose context ends returns at once, every record not acknowledged by
// then failed.
func TestPublishBatchContextDone(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	pub := newPublisher(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range pub.PublishBatch(ctx, "orders", msg("a", 0), msg("b", 0)) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("message %d: %v, want context.Canceled", i, err)
		}
	}
	if got := pub.PublishBatch(ctx, "orders"); len(got) != 0 {
		t.Errorf("no messages: %d results", len(got))
	}
}

// Records are keyed by aggregate id (by event id without one): one aggregate's
// records land on one partition, in the order published.
func TestKeyedByAggregate(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	pub := newPublisher(t, c)
	const aggs, each = 20, 30
	var msgs []*message.Message
	for seq := range each {
		for a := range aggs {
			msgs = append(msgs, msg(fmt.Sprint("agg-", a), seq))
		}
	}
	lone := msg("", 0)
	msgs = append(msgs, lone)
	// In calls of 100: one aggregate's messages are spread over calls and
	// within them.
	for i := 0; i < len(msgs); i += 100 {
		for j, err := range pub.PublishBatch(context.Background(), "orders", msgs[i:min(i+100, len(msgs))]...) {
			if err != nil {
				t.Fatalf("message %d: %v", i+j, err)
			}
		}
	}
	order := map[string]int{}
	for i, m := range msgs {
		order[m.UUID] = i
	}
	partition := map[string]int32{}
	last := map[string]int{}
	for _, r := range consume(t, c, "orders", len(msgs), 10*time.Second) {
		key := string(r.Key)
		if uuidOf(r) == lone.UUID {
			if key != lone.UUID {
				t.Errorf("event of no aggregate keyed %q, want its id", key)
			}
			continue
		}
		if p, ok := partition[key]; ok && p != r.Partition {
			t.Fatalf("aggregate %s on partitions %d and %d", key, p, r.Partition)
		}
		partition[key] = r.Partition
		i := order[uuidOf(r)]
		if prev, ok := last[key]; ok && prev > i {
			t.Fatalf("aggregate %s: message %d after %d", key, i, prev)
		}
		last[key] = i
	}
	if len(partition) != aggs {
		t.Fatalf("%d aggregates, want %d", len(partition), aggs)
	}
}

// The headers are the message UUID then one per metadata key, as
// watermill-kafka's DefaultMarshaler writes them.
func TestHeaders(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	pub := newPublisher(t, c)
	m := msg("agg", 1)
	m.Metadata.Set("tenant", "acme")
	m.Metadata.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if err := pub.Publish("orders", m); err != nil {
		t.Fatal(err)
	}
	r := consume(t, c, "orders", 1, 10*time.Second)[0]
	if r.Headers[0].Key != kafka.UUIDHeaderKey || string(r.Headers[0].Value) != m.UUID {
		t.Fatalf("first header %s=%s, want %s=%s", r.Headers[0].Key, r.Headers[0].Value, kafka.UUIDHeaderKey, m.UUID)
	}
	got := map[string]string{}
	for _, h := range r.Headers[1:] {
		got[h.Key] = string(h.Value)
	}
	if !maps.Equal(got, map[string]string(m.Metadata)) {
		t.Fatalf("headers %v, want %v", got, m.Metadata)
	}
	if string(r.Key) != "agg" || string(r.Value) != string(m.Payload) {
		t.Fatalf("key %q value %q", r.Key, r.Value)
	}
	if got[events.MetaID] != m.UUID {
		t.Fatalf("%s header %q", events.MetaID, got[events.MetaID])
	}
}
