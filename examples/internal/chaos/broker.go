package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/publishers/kafka"
)

// broker is the broker of a run, private to it: a nats-server of its own
// (-broker nats, natsjs) or a Kafka cluster in the orchestrator's process
// (kfake, -broker kafka; the relays and consumers reach it over TCP).
type broker interface {
	// URL is how the children reach it.
	URL() string
	// Stop begins an outage; Start ends it.
	Stop()
	Start() error
	// Close ends it for good.
	Close()
	// Stored is how many messages the topics hold (0 when unknown).
	Stored(topics []string) int64
	// ReadBack reads every topic whole, in the order the broker stored it.
	ReadBack(ctx context.Context, topics []string) (stored, error)
	// Debug prints the consumers' positions, to tell a lost event the broker
	// never delivered from one it saw acked.
	Debug(topics []string)
}

// startBroker starts the broker the relays publish to with -broker kind.
func startBroker(kind, dir string, topics []string) (broker, error) {
	switch kind {
	case "nats", "natsjs":
		if err := os.MkdirAll(filepath.Join(dir, "nats"), 0o700); err != nil {
			return nil, err
		}
		srv, err := brokertest.NewNATSServer(filepath.Join(dir, "nats"))
		if err != nil {
			return nil, err
		}
		if err := srv.Start(); err != nil {
			return nil, err
		}
		return &natsBroker{srv: srv}, nil
	case "kafka":
		return startKafka(topics)
	case "amqp":
		return startAMQP(topics)
	}
	return nil, fmt.Errorf("chaos: unknown -broker %q (nats, natsjs, kafka, amqp)", kind)
}

// brokerKind is the family of the relays' publisher: what the consumers
// subscribe to.
func brokerKind(publisher string) string {
	switch publisher {
	case "kafka", "amqp":
		return publisher
	}
	return "nats"
}

// newSubscriber is a Watermill subscriber to the run's broker in consumer
// group group, handling up to n messages at once (NATS; Kafka: one at a time
// per partition).
func newSubscriber(kind, url, group string, n int) (message.Subscriber, error) {
	if kind == "amqp" {
		return newAMQPSubscriber(url, group, n)
	}
	if kind == "kafka" {
		cfg := wmkafka.DefaultSaramaSubscriberConfig()
		cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		cfg.Consumer.Group.Session.Timeout = 6 * time.Second // a killed consumer's partitions move on sooner
		cfg.Consumer.Group.Heartbeat.Interval = 2 * time.Second
		// A rebalance waits this long for the members it knew (Sarama's
		// default, 60s): a killed consumer would stall the group past the
		// drain limit.
		cfg.Consumer.Group.Rebalance.Timeout = 5 * time.Second
		cfg.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
		return wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
			Brokers: []string{url}, Unmarshaler: wmkafka.DefaultMarshaler{},
			OverwriteSaramaConfig: cfg, ConsumerGroup: group,
		}, wmLogger())
	}
	cfg := brokertest.NATSSubscriberConfig(url, group)
	cfg.SubscribersCount = n
	if n == 1 {
		cfg.JetStream.AckAsync = true // the observer: do not wait on each ack
	}
	return wmnats.NewSubscriber(cfg, watermill.NopLogger{})
}

// wmLogger is the subscribers' logger: none, or Watermill's on stderr with
// CHAOS_WATERMILL_LOG set (to see a subscriber's errors).
func wmLogger() watermill.LoggerAdapter {
	if os.Getenv("CHAOS_WATERMILL_LOG") != "" {
		return watermill.NewStdLogger(false, false)
	}
	return watermill.NopLogger{}
}

// natsBroker is a nats-server of the run's own, with JetStream on disk.
type natsBroker struct {
	srv  *brokertest.NATSServer
	once sync.Once
	nc   *nats.Conn // for Stored; reconnects after an outage
}

func (b *natsBroker) URL() string  { return b.srv.URL() }
func (b *natsBroker) Stop()        { b.srv.Stop() }
func (b *natsBroker) Start() error { return b.srv.Start() }
func (b *natsBroker) Close() {
	if b.nc != nil {
		b.nc.Close()
	}
	b.srv.Stop()
}

func (b *natsBroker) Stored(topics []string) int64 {
	b.once.Do(func() {
		b.nc, _ = nats.Connect(b.srv.URL(), nats.Timeout(time.Second), nats.MaxReconnects(-1))
	})
	if b.nc == nil {
		return 0
	}
	js, err := b.nc.JetStream()
	if err != nil {
		return 0
	}
	var n int64
	for _, t := range topics {
		if info, err := js.StreamInfo(t, nats.MaxWait(time.Second)); err == nil {
			n += int64(info.State.Msgs)
		}
	}
	return n
}

func (b *natsBroker) ReadBack(ctx context.Context, topics []string) (stored, error) {
	return readStreams(ctx, b.srv.URL(), topics)
}

func (b *natsBroker) Debug(topics []string) { debugConsumers(b.srv.URL(), topics) }

// kafkaBroker is an in-process Kafka cluster (franz-go's kfake: there is no
// JVM broker here), on a fixed port. An outage makes it drop every
// connection and refuse new requests, as a broker that went away; what it
// stored stays.
type kafkaBroker struct {
	c    *kfake.Cluster
	addr string
	down atomic.Bool
	// limit is the topics' max.message.bytes (-small-batch-limit; 0: the
	// default); the produce requests' batches are measured against it.
	limit       atomic.Int64
	batches     atomic.Int64 // record batches produced
	overLimit   atomic.Int64 // of them, larger than limit (the broker refuses them)
	largestLone atomic.Int64 // the largest batch of one record, in bytes
}

// kafkaPartitions is how many partitions each topic has.
const kafkaPartitions = 8

func startKafka(topics []string) (*kafkaBroker, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(kafkaPartitions, topics...))
	if err != nil {
		return nil, fmt.Errorf("chaos: kfake: %w", err)
	}
	b := &kafkaBroker{c: c, addr: c.ListenAddrs()[0]}
	c.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if b.down.Load() {
			return nil, errors.New("chaos: broker down"), true // closes the connection
		}
		if p, ok := req.(*kmsg.ProduceRequest); ok {
			b.measure(p)
		}
		return nil, nil, false
	})
	return b, nil
}

// measure counts a produce request's record batches, those over the limit,
// and the largest batch of one record.
func (b *kafkaBroker) measure(req *kmsg.ProduceRequest) {
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			n := int64(len(p.Records))
			b.batches.Add(1)
			if l := b.limit.Load(); l > 0 && n > l {
				b.overLimit.Add(1)
			}
			var rb kmsg.RecordBatch
			if rb.ReadFrom(p.Records) == nil && rb.NumRecords == 1 && n > b.largestLone.Load() {
				b.largestLone.Store(n)
			}
		}
	}
}

// setLimit sets the topics' max.message.bytes (-small-batch-limit).
func (b *kafkaBroker) setLimit(topics []string, limit int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v := strconv.Itoa(limit)
	resp, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, topics...)
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = fmt.Errorf("chaos: max.message.bytes of %s: %w (%s)", r.Name, r.Err, r.ErrMessage)
				break
			}
		}
	}
	if err != nil {
		return err
	}
	b.limit.Store(int64(limit))
	return nil
}

func (b *kafkaBroker) URL() string  { return b.addr }
func (b *kafkaBroker) Stop()        { b.down.Store(true) }
func (b *kafkaBroker) Start() error { b.down.Store(false); return nil }
func (b *kafkaBroker) Close()       { b.c.Close() }

// ends returns the topics' partitions' end offsets.
func (b *kafkaBroker) ends(ctx context.Context, topics []string) (kadm.ListedOffsets, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
}

func (b *kafkaBroker) Stored(topics []string) int64 {
	if b.down.Load() {
		return 0
	}
	ends, err := b.ends(context.Background(), topics)
	if err != nil {
		return 0
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

func (b *kafkaBroker) ReadBack(ctx context.Context, topics []string) (stored, error) {
	var s stored
	ends, err := b.ends(ctx, topics)
	if err != nil {
		return s, fmt.Errorf("read back: %w", err)
	}
	want := map[string]map[int32]int64{}
	left := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = map[int32]int64{}
			}
			want[o.Topic][o.Partition] = o.Offset
			left++
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return s, fmt.Errorf("read back: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// Per partition, in offset order; an aggregate's events are on one.
	parts := map[string][]*kgo.Record{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return s, fmt.Errorf("read back: %d partitions not read to their end: %w", left, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			key := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			parts[key] = append(parts[key], r)
			if r.Offset+1 == want[r.Topic][r.Partition] {
				left--
			}
		})
	}
	for _, recs := range parts {
		seen := map[string]bool{}
		for _, r := range recs {
			var id string
			for _, h := range r.Headers {
				if h.Key == kafka.UUIDHeaderKey {
					id = string(h.Value)
				}
			}
			if seen[id] {
				s.dups++
				continue
			}
			seen[id] = true
			s.order = append(s.order, decodeObserved(id, r.Value))
		}
	}
	return s, nil
}

func (b *kafkaBroker) Debug([]string) {}
