package kafka_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldgo/herald/publishers/kafka"
	"github.com/heraldgo/herald/relay"
)

// createTopic creates topic on c with partitions and configs.
func createTopic(t testing.TB, c *kfake.Cluster, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	for k, v := range configs {
		rc := kmsg.NewCreateTopicsRequestTopicConfig()
		rc.Name, rc.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, rc)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// sized is a message of aggregate agg whose payload is n bytes.
func sized(agg string, seq, n int) *message.Message {
	m := msg(agg, seq)
	m.Payload = make([]byte, n)
	_, _ = rand.Read(m.Payload) // incompressible: franz-go compresses batches
	return m
}

// Issue 30, item 4: a topic whose max.message.bytes takes each record alone
// but not the batch franz-go packs them in. The brokers' MESSAGE_TOO_LARGE is
// the batch's, not each record's: every record is published (sent again in a
// batch of its own), none is refused.
func TestBatchTooLargeRecordsFitAlone(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	createTopic(t, c, "small", 1, map[string]string{"max.message.bytes": "4000"})
	pub := newPublisher(t, c)
	msgs := make([]*message.Message, 30)
	for i := range msgs {
		msgs[i] = sized(fmt.Sprint("agg-", i%3), i, 500)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	failed := 0
	for i, err := range pub.PublishBatch(ctx, "small", msgs...) {
		if err != nil {
			failed++
			t.Errorf("message %d: %v", i, err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d records failed, each fits the topic alone", failed, len(msgs))
	}
	consumeDistinct(t, c, "small", len(msgs), 10*time.Second)
}

// verdict is what a row of the contract's table says Herald does with a
// record's failure.
type verdict int

const (
	published verdict = iota // every record acknowledged
	refused                  // each record's error wraps relay.ErrRejected: a strike at once
	outage                   // each record's error is a plain one: retried, it kills nothing
)

func (v verdict) String() string { return [...]string{"published", "refused", "outage"}[v] }

// TestContract runs each row of the table in the package documentation
// ("Whose fault a failure is") against kfake: the condition is produced, and
// every record's result must be the row's verdict, wrapping the row's error.
func TestContract(t *testing.T) {
	t.Parallel()
	for _, row := range []struct {
		condition string
		want      verdict
		wantErr   error // each failed record's error wraps it
		// run produces the condition on a fresh cluster and returns each
		// record's result.
		run func(t *testing.T) []error
	}{
		{"too large alone (the topic's max.message.bytes)", refused, kerr.MessageTooLarge, func(t *testing.T) []error {
			c := newCluster(t)
			createTopic(t, c, "small", 1, map[string]string{"max.message.bytes": "4000"})
			return publish(t, newPublisher(t, c), "small", sized("a", 0, 6000))
		}},
		{"too large alone (the topic's default max.message.bytes, a payload of 1 MiB)", refused, kerr.MessageTooLarge, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			return publish(t, newPublisher(t, c), "orders", sized("a", 0, 1<<20))
		}},
		{"over a limit of the client (kgo.ProducerBatchMaxBytes set below the record)", outage, kafka.ErrClientLimit, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			return publish(t, newPublisher(t, c, kgo.ProducerBatchMaxBytes(4000)), "orders", sized("a", 0, 6000))
		}},
		{"over a limit of the client (kgo.MaxBufferedBytes set below the record)", outage, kafka.ErrClientLimit, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			return publish(t, newPublisher(t, c, kgo.MaxBufferedBytes(4000)), "orders", sized("a", 0, 6000))
		}},
		{"too large as a batch, each record fits alone", published, nil, func(t *testing.T) []error {
			c := newCluster(t)
			createTopic(t, c, "small", 1, map[string]string{"max.message.bytes": "4000"})
			return publish(t, newPublisher(t, c), "small", batch(30, 500)...)
		}},
		{"invalid as a batch (INVALID_RECORD for the batch, once)", published, nil, func(t *testing.T) []error {
			c := newCluster(t)
			createTopic(t, c, "small", 1, nil)
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "small", Err: kerr.InvalidRecord, When: moreThanOne})
			return publish(t, newPublisher(t, c), "small", batch(30, 500)...)
		}},
		{"invalid alone (INVALID_RECORD, every time)", refused, kerr.InvalidRecord, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.InvalidRecord, Count: -1})
			return publish(t, newPublisher(t, c), "orders", msg("a", 0), msg("b", 0))
		}},
		{"bad header (reserved metadata key)", refused, kafka.ErrReservedMetadata, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			m := msg("a", 0)
			m.Metadata.Set(kafka.UUIDHeaderKey, "x")
			return publish(t, newPublisher(t, c), "orders", m)
		}},
		{"invalid topic name (INVALID_TOPIC_EXCEPTION)", refused, kerr.InvalidTopicException, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			// kfake answers an invalid name as an unknown topic; a Kafka
			// broker's metadata answers this.
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "bad topic!", Err: kerr.InvalidTopicException, Count: -1})
			return publish(t, newPublisher(t, c), "bad topic!", msg("a", 0))
		}},
		{"full (a broker's disk: KAFKA_STORAGE_ERROR, retried by franz-go until the call's deadline)", outage, context.DeadlineExceeded, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.KafkaStorageError, Count: -1})
			return publishWithin(t, newPublisher(t, c), time.Second, "orders", msg("a", 0), msg("b", 0))
		}},
		{"topic missing (UNKNOWN_TOPIC_OR_PARTITION)", outage, kerr.UnknownTopicOrPartition, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			return publish(t, newPublisher(t, c, kgo.UnknownTopicRetries(1)), "missing", msg("a", 0), msg("b", 0))
		}},
		{"permission denied (TOPIC_AUTHORIZATION_FAILED)", outage, kerr.TopicAuthorizationFailed, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.TopicAuthorizationFailed, Count: -1})
			return publish(t, newPublisher(t, c), "orders", msg("a", 0), msg("b", 0))
		}},
		{"timeout (REQUEST_TIMED_OUT until the call's deadline)", outage, context.DeadlineExceeded, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.RequestTimedOut, Count: -1})
			return publishWithin(t, newPublisher(t, c), time.Second, "orders", msg("a", 0), msg("b", 0))
		}},
		{"connection lost (the cluster gone)", outage, nil, func(t *testing.T) []error {
			c := newCluster(t, "orders")
			pub := newPublisher(t, c)
			for _, err := range publish(t, pub, "orders", msg("a", 0)) {
				if err != nil {
					t.Fatalf("before the cluster closed: %v", err)
				}
			}
			c.Close()
			return publishWithin(t, pub, time.Second, "orders", msg("a", 1), msg("b", 0))
		}},
	} {
		t.Run(row.condition, func(t *testing.T) {
			t.Parallel()
			for i, err := range row.run(t) {
				switch {
				case row.want == published && err != nil:
					t.Errorf("record %d: %v, want it published", i, err)
				case row.want == published:
				case err == nil:
					t.Errorf("record %d published, want %v", i, row.want)
				case (row.want == refused) != errors.Is(err, relay.ErrRejected):
					t.Errorf("record %d: %v, want %v (relay.ErrRejected wrapped: %v)", i, err, row.want, row.want == refused)
				case row.wantErr != nil && !errors.Is(err, row.wantErr):
					t.Errorf("record %d: %v, want it to wrap %v", i, err, row.wantErr)
				}
			}
		})
	}
}

// publish is pub.PublishBatch within 10 s.
func publish(t *testing.T, pub *kafka.Publisher, topic string, msgs ...*message.Message) []error {
	return publishWithin(t, pub, 10*time.Second, topic, msgs...)
}

func publishWithin(t *testing.T, pub *kafka.Publisher, d time.Duration, topic string, msgs ...*message.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	errs := pub.PublishBatch(ctx, topic, msgs...)
	if len(errs) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(errs), len(msgs))
	}
	return errs
}

// batch is n messages of size bytes, of three aggregates.
func batch(n, size int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = sized(fmt.Sprint("agg-", i%3), i, size)
	}
	return msgs
}

// moreThanOne matches a produce request whose record batch holds more than one
// record.
func moreThanOne(r kmsg.Request) bool {
	for _, rt := range r.(*kmsg.ProduceRequest).Topics {
		for _, rp := range rt.Partitions {
			var b kmsg.RecordBatch
			if b.ReadFrom(rp.Records) == nil && b.NumRecords > 1 {
				return true
			}
		}
	}
	return false
}
