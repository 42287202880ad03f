package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/publish"
)

// UUIDHeaderKey is the record header that carries the message UUID, as
// watermill-kafka's DefaultMarshaler writes it (kafka.UUIDHeaderKey there).
const UUIDHeaderKey = "_watermill_message_uuid"

// Errors the publisher returns.
var (
	// ErrClosed is a publish on a Publisher that was closed.
	ErrClosed = errors.New("kafka: publisher closed")
	// ErrReservedMetadata is a message whose metadata sets UUIDHeaderKey,
	// which watermill-kafka reserves for the message UUID.
	ErrReservedMetadata = errors.New("kafka: metadata key " + UUIDHeaderKey + " is reserved for the message UUID")
	// ErrUnsafeOption is an option in Config.Options that turns off the
	// idempotent producer or acks=all.
	ErrUnsafeOption = errors.New("kafka: option unsafe for an outbox")
	// ErrClientLimit is a record larger than a limit of the publisher's own
	// franz-go client (kgo.ProducerBatchMaxBytes, kgo.MaxBufferedBytes,
	// kgo.BrokerMaxWriteBytes in Config.Options), which refused it before
	// sending it: the caller's configuration, not the record's fault, so
	// it is an outage (retried, no strike) until the setting, which the
	// error names, is raised.
	ErrClientLimit = errors.New("kafka: record over a limit of the publisher's client")
)

// Limits on what the publisher's clients send, so that every event the write
// path accepts reaches the brokers, which decide (the topic's
// max.message.bytes) whether a record is too large.
const (
	// DefaultBatchMaxBytes is the kgo.ProducerBatchMaxBytes the publisher's
	// client packs records in batches up to: 1,048,588 bytes, Kafka's
	// default max.message.bytes (franz-go's own default, 1,000,012, is
	// Kafka's old one, below outboxhook.DefaultMaxPayloadBytes). A
	// kgo.ProducerBatchMaxBytes in Config.Options replaces it.
	DefaultBatchMaxBytes = 1_048_588
	// DefaultRecordMaxBytes is the kgo.ProducerBatchMaxBytes of the client
	// that produces records one per batch (a record larger than the batch
	// limit, or refused with its batch: see "Whose fault a failure is"):
	// 9 MiB, room for the largest payload the write path can be set to
	// accept (outboxhook.MaxPayloadLimit, 8 MiB) with its metadata as
	// headers. A kgo.ProducerBatchMaxBytes in Config.Options replaces it.
	DefaultRecordMaxBytes = 9 << 20
)

// Config configures a Publisher.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Options are extra franz-go client options (TLS, SASL, compression,
	// linger, retries, a partitioner, ...), applied after the publisher's
	// own: kgo.RequiredAcks(kgo.AllISRAcks()) with the idempotent producer
	// (franz-go's defaults, set explicitly), kgo.ProducerLinger(0) (a
	// PublishBatch call hands over all its records at once: lingering would
	// only delay them), and kgo.ProducerBatchMaxBytes(DefaultBatchMaxBytes)
	// (DefaultRecordMaxBytes for records sent alone). A
	// kgo.ProducerBatchMaxBytes, kgo.MaxBufferedBytes or
	// kgo.BrokerMaxWriteBytes set here below a record fails it with
	// ErrClientLimit, an outage: set them no lower than the write path's
	// outboxhook.Config.MaxPayloadBytes plus its metadata. New refuses, with
	// ErrUnsafeOption, an option that
	// turns off idempotence or acks=all (kgo.DisableIdempotentWrite,
	// kgo.RequiredAcks with other acks), kgo.DefaultProduceTopicAlways and
	// kgo.TransactionalID. A partitioner that ignores record keys
	// (kgo.ManualPartitioner, kgo.RoundRobinPartitioner) is not refused but
	// breaks the per-aggregate order. Defaults to none.
	Options []kgo.Opt
	// Logger receives franz-go's log lines, at the levels the logger
	// enables. Defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports what is wrong with c, after its defaults are set.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("kafka: Config.Brokers is required")
	}
	if slices.Contains(c.Brokers, "") {
		return errors.New("kafka: Config.Brokers holds an empty address")
	}
	if slices.Contains(c.Options, nil) {
		return errors.New("kafka: Config.Options holds a nil option")
	}
	return nil
}

// Publisher publishes Watermill messages to Kafka with franz-go's idempotent
// producer and acks=all, each message a record keyed by its aggregate id. It
// is a Watermill message.Publisher and a publish.BatchPublisher. It is safe for
// concurrent use.
type Publisher struct {
	client *kgo.Client
	opts   []kgo.Opt  // solo's client's options
	solo   soloClient // records produced again alone (see classify)
	log    *slog.Logger
	closed atomic.Bool
	once   sync.Once
}

var (
	_ message.Publisher      = (*Publisher)(nil)
	_ publish.BatchPublisher = (*Publisher)(nil)
)

// New checks cfg and makes a Publisher with its own franz-go client. The
// client connects lazily: New does not reach the brokers.
func New(cfg Config) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.WithLogger(slogLogger{cfg.Logger}),
	}
	with := func(batchMax int32) []kgo.Opt {
		opts := append(append([]kgo.Opt{}, base...), kgo.ProducerBatchMaxBytes(batchMax))
		return append(opts, cfg.Options...)
	}
	opts := with(DefaultBatchMaxBytes)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: new client: %w", err)
	}
	if err := checkSafe(client); err != nil {
		client.Close()
		return nil, err
	}
	// The solo client's batch limit must not exceed its kgo.BrokerMaxWriteBytes.
	soloMax := int32(DefaultRecordMaxBytes)
	if w, ok := client.OptValue(kgo.BrokerMaxWriteBytes).(int32); ok && w > 0 && w < soloMax {
		soloMax = w
	}
	return &Publisher{client: client, opts: with(soloMax), log: cfg.Logger}, nil
}

// checkSafe refuses a client without the idempotent producer or acks=all.
func checkSafe(client *kgo.Client) error {
	if acks, _ := client.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		return fmt.Errorf("%w: kgo.RequiredAcks other than kgo.AllISRAcks()", ErrUnsafeOption)
	}
	if off, _ := client.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		return fmt.Errorf("%w: kgo.DisableIdempotentWrite", ErrUnsafeOption)
	}
	if always, _ := client.OptValue(kgo.DefaultProduceTopicAlways).(bool); always {
		return fmt.Errorf("%w: kgo.DefaultProduceTopicAlways (the relay's topics would be ignored)", ErrUnsafeOption)
	}
	if txn, _ := client.OptValue(kgo.TransactionalID).(string); txn != "" {
		return fmt.Errorf("%w: kgo.TransactionalID (the publisher produces outside transactions)", ErrUnsafeOption)
	}
	return nil
}

// Client returns the franz-go client the publisher produces with, for
// metrics or admin requests. Do not close it: Close does.
func (p *Publisher) Client() *kgo.Client { return p.client }

// Publish publishes msgs to topic and waits until the brokers acknowledged
// each (or franz-go gave up on it: see kgo.RecordDeliveryTimeout and
// kgo.RecordRetries), as Watermill's Publish does. It returns nil when every
// message was acknowledged, else the errors of the failed ones, joined.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	var errs []error
	for i, err := range p.PublishBatch(context.Background(), topic, msgs...) {
		if err != nil {
			errs = append(errs, fmt.Errorf("kafka: message %d (%s): %w", i, msgs[i].UUID, err))
		}
	}
	return errors.Join(errs...)
}

// PublishBatch produces msgs to topic, all at once (franz-go batches them
// per partition and keeps several requests in flight), and returns one error
// per message, in the order of msgs: nil when the brokers acknowledged that
// record with acks=all. One record's failure does not fail the others' results:
// each record gets its own. When the brokers refuse a partition's batch,
// franz-go (with the idempotent producer) fails it and every record buffered
// behind it in that partition, each with that error; records buffered after
// that may be acknowledged. So within one call, an acknowledged record of a
// key may follow a failed one of the same key: the relay's ordered mode sends
// at most one event per aggregate per call. A message whose metadata sets
// UUIDHeaderKey fails with ErrReservedMetadata. Those, and the brokers'
// refusals of a record itself (too large, invalid), wrap publish.ErrRejected;
// a refusal of a batch of several records is no record's own: each is
// produced again in a batch of its own, within the call, and that answer is
// its result (see "Whose fault a failure is" in the package documentation).
// A record not yet sent when
// ctx is done fails with ctx's error; PublishBatch returns when every record
// has its result, or when ctx is done: then the records without one get ctx's
// error (they may still be written: the relay publishes them again).
func (p *Publisher) PublishBatch(ctx context.Context, topic string, msgs ...*message.Message) []error {
	res := make([]error, len(msgs))
	if p.closed.Load() {
		for i := range res {
			res[i] = ErrClosed
		}
		return res
	}
	var (
		mu      sync.Mutex
		left    = len(msgs)
		done    = make(chan struct{})
		have    = make([]bool, len(msgs)) // res[i] is the record's result
		settled bool                      // ctx ended: late results are dropped
	)
	finish := func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if settled {
			return
		}
		res[i], have[i] = err, true
		left--
		if left == 0 {
			close(done)
		}
	}
	if left == 0 {
		return res
	}
	for i, m := range msgs {
		rec, err := record(topic, m)
		if err != nil {
			out, _ := classify(topic, err, true)
			finish(i, out)
			continue
		}
		p.client.Produce(ctx, rec, func(rec *kgo.Record, err error) {
			out, again := classify(topic, err, false)
			if !again {
				finish(i, out)
				return
			}
			// Refused with its batch: its own verdict is the answer to it
			// alone. Not in franz-go's goroutine: a promise must not block.
			go func() {
				out, _ := classify(topic, p.alone(ctx, rec), true)
				finish(i, out)
			}()
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		settled = true
		for i := range res {
			if !have[i] {
				res[i] = fmt.Errorf("kafka: produce to %s: %w", topic, ctx.Err())
			}
		}
	}
	return res
}

// record is the Kafka record of msg: its value the payload; its key the
// aggregate id (events.MetaAggregateID), or for an event of no aggregate the
// event id; its headers the UUID (UUIDHeaderKey) then one per metadata key,
// as watermill-kafka's DefaultMarshaler writes them.
func record(topic string, msg *message.Message) (*kgo.Record, error) {
	if _, ok := msg.Metadata[UUIDHeaderKey]; ok {
		return nil, ErrReservedMetadata
	}
	key := msg.Metadata[events.MetaAggregateID]
	if key == "" {
		key = msg.Metadata[events.MetaID]
	}
	if key == "" {
		key = msg.UUID
	}
	// The header values share one buffer: one allocation per record.
	size := len(msg.UUID)
	keys := make([]string, 0, len(msg.Metadata))
	for k, v := range msg.Metadata {
		keys = append(keys, k)
		size += len(v)
	}
	slices.Sort(keys)
	buf := make([]byte, 0, size)
	value := func(v string) []byte {
		start := len(buf)
		buf = append(buf, v...)
		return buf[start:len(buf):len(buf)]
	}
	headers := make([]kgo.RecordHeader, 0, len(keys)+1)
	headers = append(headers, kgo.RecordHeader{Key: UUIDHeaderKey, Value: value(msg.UUID)})
	for _, k := range keys {
		headers = append(headers, kgo.RecordHeader{Key: k, Value: value(msg.Metadata[k])})
	}
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: msg.Payload, Headers: headers}, nil
}

// Close closes the client: a publish after Close fails with ErrClosed, and
// the records still buffered fail. Close does not wait for the publishes in
// flight; call it after they returned. It is safe to call more than once.
func (p *Publisher) Close() error {
	p.once.Do(func() {
		p.closed.Store(true)
		p.client.Close()
		p.solo.close()
	})
	return nil
}

// slogLogger is franz-go's logger on an slog.Logger.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case s.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case s.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	case s.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	default:
		return kgo.LogLevelError
	}
}

func (s slogLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelError
	switch level {
	case kgo.LogLevelDebug:
		lvl = slog.LevelDebug
	case kgo.LogLevelInfo:
		lvl = slog.LevelInfo
	case kgo.LogLevelWarn:
		lvl = slog.LevelWarn
	}
	s.l.Log(context.Background(), lvl, "kafka: "+msg, keyvals...)
}
