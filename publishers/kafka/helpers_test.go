package kafka_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/publishers/kafka"
)

// newCluster starts an in-process kfake cluster (three brokers) with topics of
// four partitions, closed when the test ends.
func newCluster(t testing.TB, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(4, topics...))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// newPublisher makes a Publisher on c, closed when the test ends.
func newPublisher(t testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kafka.Publisher {
	t.Helper()
	pub, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), Options: opts, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatalf("kafka.New: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// msg is a message as the relay builds it: of aggregate agg (none when
// empty), with its Seq as payload.
func msg(agg string, seq int) *message.Message {
	id := uuid.New().String()
	m := message.NewMessage(id, []byte(strings.Repeat("x", 64)+"#"+strconv.Itoa(seq)))
	m.Metadata.Set(events.MetaID, id)
	m.Metadata.Set(events.MetaType, "account.deposited")
	if agg != "" {
		m.Metadata.Set(events.MetaAggregateType, "account")
		m.Metadata.Set(events.MetaAggregateID, agg)
	}
	return m
}

// consume reads topic from the start with franz-go until it holds n records
// (or fails the test after timeout), and returns them in partition order.
func consume(t testing.TB, c *kfake.Cluster, topic string, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	return consumeUntil(t, c, topic, timeout, func(got []*kgo.Record) bool { return len(got) >= n })
}

// consumeDistinct reads topic until it holds n distinct message UUIDs: with
// the copies a retry makes, maybe more records.
func consumeDistinct(t testing.TB, c *kfake.Cluster, topic string, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	seen, read := map[string]bool{}, 0
	return consumeUntil(t, c, topic, timeout, func(got []*kgo.Record) bool {
		for _, r := range got[read:] {
			seen[uuidOf(r)] = true
		}
		read = len(got)
		return len(seen) >= n
	})
}

// consumeUntil reads topic from the start with franz-go until done says the
// records read are enough (or fails the test after timeout).
func consumeUntil(t testing.TB, c *kfake.Cluster, topic string, timeout time.Duration, done func([]*kgo.Record) bool) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for !done(out) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume %s: %d records after %v, not enough", topic, len(out), timeout)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// uuidOf is the message UUID a record carries.
func uuidOf(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == kafka.UUIDHeaderKey {
			return string(h.Value)
		}
	}
	return ""
}

// failProduce makes the cluster answer one produce request with code on
// every partition it holds: the first, from the nth (counting from 1), that
// holds at least minRecords records. The others are served normally.
func failProduce(c *kfake.Cluster, nth int64, minRecords int, code *kerr.Error) *injected {
	in := &injected{}
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		preq := req.(*kmsg.ProduceRequest)
		n := 0
		for _, rt := range preq.Topics {
			for _, rp := range rt.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(rp.Records); err == nil {
					n += int(b.NumRecords)
				}
			}
		}
		if in.seen.Add(1) < nth || n < minRecords {
			return nil, nil, false
		}
		c.DropControl()
		in.records.Store(int64(n))
		resp := preq.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range preq.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			st.TopicID = rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return in
}

// injected is what failProduce saw: the produce requests until it failed one
// (seen), and how many records the failed one held.
type injected struct {
	seen, records atomic.Int64
}
