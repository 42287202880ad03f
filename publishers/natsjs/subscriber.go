package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of SubscriberConfig.
const (
	// DefaultSubscriberAckWait is SubscriberConfig.AckWait's default.
	DefaultSubscriberAckWait = 30 * time.Second
	// DefaultSubscribeTimeout is SubscriberConfig.SubscribeTimeout's default.
	DefaultSubscribeTimeout = 30 * time.Second
)

// SubscriberConfig configures a Subscriber, a consumer's subscriber for what
// Publisher publishes. A zero field takes its default; NewSubscriber fails on
// a configuration Validate refuses.
type SubscriberConfig struct {
	// URL is the NATS server NewSubscriber connects to (several,
	// comma-separated, for a cluster). Required.
	URL string

	// Consumer names the consumer (a service, say "shipping"): the name of
	// its durable JetStream consumer on each topic's stream, and its queue
	// group, so that the instances of one consumer share its messages (each
	// message to one of them) and JetStream keeps its position and its
	// unacknowledged messages across restarts. Required; a valid consumer
	// name: no '.', '*', '>', whitespace or path separator.
	Consumer string

	// AckWait is how long JetStream waits for a message's ack before it
	// delivers the message again, and how long the subscriber waits for the
	// handler to ack or nack it: make it longer than a handler takes. A
	// handler still running past it has its message delivered again (a
	// duplicate, which the inbox skips) and its late ack dropped. Defaults to
	// DefaultSubscriberAckWait (30s).
	AckWait time.Duration

	// MaxDeliver is how many times JetStream delivers a message at most. 0,
	// the default, is unlimited: a message whose handler keeps failing keeps
	// coming back (after NakDelay), and is never lost. With a limit, a
	// message delivered that many times without an ack is dropped for this
	// consumer, its effects never made (JetStream only publishes an
	// advisory): set one only with a watcher of those advisories.
	MaxDeliver int

	// MaxAckPending bounds the messages delivered to the consumer (all its
	// instances together) and not yet acked. Defaults to 0: the server's
	// default (1,000).
	MaxAckPending int

	// NakDelay is how long JetStream waits before delivering again a message
	// the handler nacked (returned an error for). Defaults to 0: at once.
	NakDelay time.Duration

	// AutoProvision creates a topic's stream on Subscribe when none captures
	// the topic, as Publisher with Config.AutoProvision does, with the same
	// StreamConfig: a consumer may start before the first publish. Defaults
	// to false: the streams must exist.
	AutoProvision bool

	// StreamConfig is the stream AutoProvision creates for a topic. Defaults
	// to DefaultStreamConfig, as Config.StreamConfig.
	StreamConfig func(topic string) jetstream.StreamConfig

	// SubscribeTimeout bounds the look-ups and creations Subscribe makes on
	// the server (the stream, the durable consumer). Defaults to
	// DefaultSubscribeTimeout (30s).
	SubscribeTimeout time.Duration

	// NATSOptions are options of the connection NewSubscriber opens, applied
	// after Herald's own (reconnect forever, every 250ms). Defaults to none.
	NATSOptions []nats.Option

	// Logger receives the Subscriber's log lines and watermill-nats'.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

func (c *SubscriberConfig) setDefaults() {
	if c.AckWait == 0 {
		c.AckWait = DefaultSubscriberAckWait
	}
	if c.SubscribeTimeout == 0 {
		c.SubscribeTimeout = DefaultSubscribeTimeout
	}
	if c.StreamConfig == nil {
		c.StreamConfig = DefaultStreamConfig
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports what is wrong with c, its defaults applied: every problem,
// joined.
func (c SubscriberConfig) Validate() error {
	c.setDefaults()
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("natsjs: "+format, args...))
		}
	}
	check(c.URL != "", "URL is required")
	check(c.Consumer != "", "Consumer is required")
	check(c.Consumer == "" || DefaultStreamConfig(c.Consumer).Name == c.Consumer && validSubject(c.Consumer),
		"Consumer %q is not a valid consumer name (no '.', '*', '>', whitespace or path separator)", c.Consumer)
	check(c.AckWait > 0, "AckWait is %v, must be positive", c.AckWait)
	check(c.MaxDeliver >= 0, "MaxDeliver is %d, must be 0 (unlimited) or positive", c.MaxDeliver)
	check(c.MaxAckPending >= 0, "MaxAckPending is %d, must be 0 (the server's default) or positive", c.MaxAckPending)
	check(c.NakDelay >= 0, "NakDelay is %v, must not be negative", c.NakDelay)
	check(c.SubscribeTimeout > 0, "SubscribeTimeout is %v, must be positive", c.SubscribeTimeout)
	return errors.Join(errs...)
}

// maxDeliver is MaxDeliver as JetStream takes it: -1 for unlimited.
func (c SubscriberConfig) maxDeliver() int {
	if c.MaxDeliver == 0 {
		return -1
	}
	return c.MaxDeliver
}

// Watermill is the watermill-nats configuration of c's subscriber, its
// defaults applied: for a program that builds the subscriber itself
// (wmnats.NewSubscriberWithNatsConn), and to read what NewSubscriber sets.
// Its settings, each needed for an outbox's messages:
//
//   - NATSMarshaler as the Unmarshaler: it reads the message UUID (the event
//     id, which the inbox keys on) and the metadata from the headers Publisher
//     writes, and skips Nats-Msg-Id;
//   - Consumer as the queue group and the durable name, one subscriber per
//     process (SubscribersCount 1);
//   - the subscribe options DeliverAll (a new consumer reads each stream from
//     its start: events published before it first ran are not skipped),
//     AckExplicit, AckWait, MaxDeliver and ManualAck. Without ManualAck
//     nats.go acks each message when watermill-nats' callback returns, which
//     it does when AckWaitTimeout passes or the subscriber closes while the
//     handler still runs: a handler that then fails, or a process that
//     stops, loses the message's effects;
//   - AckWaitTimeout equal to AckWait, so the subscriber stops waiting for
//     the handler when JetStream delivers the message again; the ack the
//     subscriber sends after the handler is AckSync (watermill-nats' default,
//     AckAsync false): it waits for the server to confirm it;
//   - CloseTimeout 5s: how long Close waits for the subscriptions to end
//     (not for handlers);
//   - no AutoProvision: watermill-nats would create a stream named after the
//     topic, which differs from Publisher's for a topic with a '.';
//     Subscriber provisions the stream itself, as Publisher does.
//
// The durable consumer must exist before a subscriber built on this
// configuration subscribes (Subscriber.SubscribeInitialize creates it):
// nats.go deletes a durable consumer it created itself when that
// subscription ends, and with it the consumer's position and its
// unacknowledged messages.
func (c SubscriberConfig) Watermill() wmnats.SubscriberSubscriptionConfig {
	c.setDefaults()
	opts := []nats.SubOpt{nats.DeliverAll(), nats.AckExplicit(), nats.ManualAck(),
		nats.AckWait(c.AckWait), nats.MaxDeliver(c.maxDeliver())}
	if c.MaxAckPending > 0 {
		opts = append(opts, nats.MaxAckPending(c.MaxAckPending))
	}
	var nak wmnats.Delay
	if c.NakDelay > 0 {
		nak = wmnats.NewStaticDelay(c.NakDelay)
	}
	return wmnats.SubscriberSubscriptionConfig{
		Unmarshaler:      &wmnats.NATSMarshaler{},
		SubscribersCount: 1,
		AckWaitTimeout:   c.AckWait,
		CloseTimeout:     5 * time.Second,
		SubscribeTimeout: c.SubscribeTimeout,
		QueueGroupPrefix: c.Consumer,
		NakDelay:         nak,
		JetStream: wmnats.JetStreamConfig{
			DurablePrefix:    c.Consumer,
			SubscribeOptions: opts,
		},
	}
}

// Subscriber is a consumer's Watermill subscriber for what Publisher
// publishes: watermill-nats' JetStream subscriber, configured as
// SubscriberConfig.Watermill says, on a durable consumer that Subscribe
// creates on the topic's stream (and the stream too, with AutoProvision)
// and that outlives the Subscriber. Each message is acked (AckSync) only
// once the handler acked it, after the inbox's transaction committed; a
// message whose process stopped or whose subscriber closed before that is
// delivered again after AckWait, to any instance of the consumer.
type Subscriber struct {
	cfg SubscriberConfig
	log *slog.Logger
	nc  *nats.Conn
	js  jetstream.JetStream
	sub *wmnats.Subscriber

	mu    sync.Mutex
	ready map[string]bool // topics whose stream and consumer exist
}

var _ message.SubscribeInitializer = (*Subscriber)(nil)

// NewSubscriber connects to cfg.URL and returns the Subscriber of
// cfg.Consumer. A configuration Validate refuses fails here.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}, cfg.NATSOptions...)
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("natsjs: connect to %s: %w", cfg.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsjs: jetstream: %w", err)
	}
	sub, err := wmnats.NewSubscriberWithNatsConn(nc, cfg.Watermill(), watermill.NewSlogLogger(cfg.Logger))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsjs: watermill-nats subscriber: %w", err)
	}
	return &Subscriber{cfg: cfg, log: cfg.Logger, nc: nc, js: js, sub: sub, ready: map[string]bool{}}, nil
}

// Subscribe returns the messages of topic (the NATS subject) for the
// consumer, until ctx is done or the Subscriber closes. It first makes sure,
// as SubscribeInitialize, that a stream captures topic and that the durable
// consumer exists on it. Ack each message once its handler's effects are
// committed (Watermill's router does, behind the inbox's middleware); a
// message nacked is delivered again after NakDelay.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := s.initialize(ctx, topic); err != nil {
		return nil, err
	}
	ch, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("natsjs: subscribe to %q as %q: %w", topic, s.cfg.Consumer, err)
	}
	return ch, nil
}

// SubscribeInitialize makes sure a stream captures topic (with
// AutoProvision, it creates SubscriberConfig.StreamConfig(topic) if none
// does) and that the consumer's durable JetStream consumer exists on it,
// creating it if not: named SubscriberConfig.Consumer, its queue group the
// same name, filtered to topic, delivering every message from the stream's
// start, acked explicitly, with AckWait, MaxDeliver and MaxAckPending. One
// consumer name serves one topic per stream: where one stream captures
// several topics (a stream of the operator's own), subscribe to each from a
// Subscriber of another Consumer name. A consumer that exists is left as it
// is: if its filter subject, deliver group, ack policy, AckWait,
// MaxDeliver or MaxAckPending (when set) differ from the Subscriber's,
// SubscribeInitialize and Subscribe fail with ErrConsumerMismatch, naming
// them.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	return s.initialize(context.Background(), topic)
}

func (s *Subscriber) initialize(ctx context.Context, topic string) error {
	if !validSubject(topic) {
		return fmt.Errorf("natsjs: topic %q: %w", topic, nats.ErrBadSubject)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready[topic] {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SubscribeTimeout)
	defer cancel()
	if s.cfg.AutoProvision {
		if err := provisionStream(ctx, s.js, s.cfg.StreamConfig(topic), s.log); err != nil {
			return err
		}
	}
	name, err := s.js.StreamNameBySubject(ctx, topic)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("natsjs: no stream captures topic %q (create it, or set AutoProvision): %w", topic, err)
		}
		return fmt.Errorf("natsjs: look up the stream of topic %q: %w", topic, err)
	}
	stream, err := s.js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("natsjs: stream %q: %w", name, err)
	}
	switch c, err := stream.PushConsumer(ctx, s.cfg.Consumer); {
	case err == nil:
		if err := s.matches(topic, c.CachedInfo().Config); err != nil {
			return fmt.Errorf("natsjs: consumer %q on stream %q: %w", s.cfg.Consumer, name, err)
		}
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		cc := jetstream.ConsumerConfig{
			Durable:        s.cfg.Consumer,
			DeliverSubject: s.nc.NewInbox(),
			DeliverGroup:   s.cfg.Consumer,
			FilterSubject:  topic,
			DeliverPolicy:  jetstream.DeliverAllPolicy,
			AckPolicy:      jetstream.AckExplicitPolicy,
			AckWait:        s.cfg.AckWait,
			MaxDeliver:     s.cfg.maxDeliver(),
			MaxAckPending:  s.cfg.MaxAckPending,
		}
		_, err := stream.CreatePushConsumer(ctx, cc)
		switch {
		case err == nil:
			s.log.Info("natsjs: durable consumer created", "stream", name, "consumer", s.cfg.Consumer)
		case errors.Is(err, jetstream.ErrConsumerExists):
			// Another instance created it first.
		default:
			return fmt.Errorf("natsjs: create consumer %q on stream %q: %w", s.cfg.Consumer, name, err)
		}
	default:
		return fmt.Errorf("natsjs: consumer %q on stream %q: %w", s.cfg.Consumer, name, err)
	}
	s.ready[topic] = true
	return nil
}

// ErrConsumerMismatch is a durable consumer that exists with settings other
// than the Subscriber's.
var ErrConsumerMismatch = errors.New("natsjs: the durable consumer exists with other settings " +
	"(change it with the nats CLI, or delete it, which forgets its position)")

// matches reports how the existing consumer cc differs from what the
// Subscriber would create, as nats.go would at subscribe.
func (s *Subscriber) matches(topic string, cc jetstream.ConsumerConfig) error {
	var diffs []string
	diff := func(differs bool, format string, args ...any) {
		if differs {
			diffs = append(diffs, fmt.Sprintf(format, args...))
		}
	}
	diff(cc.FilterSubject != topic, "filter subject %q, want %q", cc.FilterSubject, topic)
	diff(cc.DeliverGroup != s.cfg.Consumer, "deliver group %q, want %q", cc.DeliverGroup, s.cfg.Consumer)
	diff(cc.AckPolicy != jetstream.AckExplicitPolicy, "ack policy %v, want explicit", cc.AckPolicy)
	diff(cc.AckWait != s.cfg.AckWait, "ack wait %v, want %v", cc.AckWait, s.cfg.AckWait)
	maxDeliver := cc.MaxDeliver
	if maxDeliver <= 0 {
		maxDeliver = -1 // unlimited
	}
	diff(maxDeliver != s.cfg.maxDeliver(), "max deliver %d, want %d", cc.MaxDeliver, s.cfg.maxDeliver())
	diff(s.cfg.MaxAckPending > 0 && cc.MaxAckPending != s.cfg.MaxAckPending,
		"max ack pending %d, want %d", cc.MaxAckPending, s.cfg.MaxAckPending)
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrConsumerMismatch, strings.Join(diffs, "; "))
}

// Close ends the Subscriber's subscriptions and closes its connection, once
// the acks already given are sent (waiting at most 5s). The messages its
// handlers had not acked are delivered again after AckWait; the durable
// consumers stay.
func (s *Subscriber) Close() error {
	err := s.sub.Close() // drains the connection: the acks under way are sent
	for deadline := time.Now().Add(5 * time.Second); !s.nc.IsClosed() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	s.nc.Close()
	if err != nil {
		return fmt.Errorf("natsjs: close subscriber: %w", err)
	}
	return nil
}
