package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/publishers/kafka"
	"github.com/heraldgo/herald/publishers/natsjs"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/walrelay"
)

// Account is the chaos run's aggregate: every save records Deposited with the
// account's next version, so a consumer can tell the order.
type Account struct {
	ID      uuid.UUID `gorm:"type:uuid;primaryKey"`
	Version int
	aggregate.Root
	// carried are the events of the account a ROLLBACK TO undid in a
	// transaction that committed (-savepoints): pending on it still, they
	// commit with its next save (outboxhook writes them then).
	carried []string
}

// Deposited is the chaos run's event.
type Deposited struct {
	AccountID uuid.UUID `json:"account_id"`
	Version   int       `json:"version"`
}

func (Deposited) EventType() string { return "chaos.deposited" }

// Effect is a consumer's effect: one row per handled event.
type Effect struct {
	ID        int64  `gorm:"primaryKey"`
	EventID   string `gorm:"index"`
	AccountID string
	Version   int
	Consumer  string
}

// env is what the orchestrator hands its child processes: where things are,
// and the relays' retry settings.
type env struct {
	kind          string // the database: postgresDB, sqliteDB or mysqlDB
	dsn, nats, id string
	poll          time.Duration // the relays' PollInterval
	topics        []string      // the first is never refused; the second is, in the refusal windows
	refuseFile    string        // the refusal windows (see refusals)
	relay         relaySettings
}

// relaySettings are the relays' retry settings, small so that deaths can
// happen within the run (see the -max-attempts flag).
type relaySettings struct {
	maxAttempts            int
	minBackoff, maxBackoff time.Duration
	publishTimeout, lease  time.Duration
}

func (s relaySettings) config() relay.Config {
	return relay.Config{MaxAttempts: s.maxAttempts, MinBackoff: s.minBackoff, MaxBackoff: s.maxBackoff,
		PublishTimeout: s.publishTimeout, LeaseDuration: s.lease}
}

func childEnv() env {
	atoi := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	dur := func(k string) time.Duration { d, _ := time.ParseDuration(os.Getenv(k)); return d }
	if f := os.Getenv("CHAOS_REFUSE_FILE"); f != "" {
		lockDir = filepath.Dir(f) // the run's directory
	}
	return env{
		kind: os.Getenv("CHAOS_DB"), poll: dur("CHAOS_POLL"),
		dsn: os.Getenv("CHAOS_DSN"), nats: os.Getenv("CHAOS_NATS"), id: os.Getenv("CHAOS_ID"),
		topics: strings.Split(os.Getenv("CHAOS_TOPICS"), ","), refuseFile: os.Getenv("CHAOS_REFUSE_FILE"),
		relay: relaySettings{maxAttempts: atoi("CHAOS_MAX_ATTEMPTS"), minBackoff: dur("CHAOS_MIN_BACKOFF"),
			maxBackoff: dur("CHAOS_MAX_BACKOFF"), publishTimeout: dur("CHAOS_PUBLISH_TIMEOUT"), lease: dur("CHAOS_LEASE")},
	}
}

func (e env) vars() []string {
	return []string{"CHAOS_DB=" + e.kind, "CHAOS_POLL=" + e.poll.String(), "CHAOS_DSN=" + e.dsn, "CHAOS_NATS=" + e.nats, "CHAOS_ID=" + e.id,
		"CHAOS_TOPICS=" + strings.Join(e.topics, ","), "CHAOS_REFUSE_FILE=" + e.refuseFile,
		fmt.Sprint("CHAOS_MAX_ATTEMPTS=", e.relay.maxAttempts), "CHAOS_MIN_BACKOFF=" + e.relay.minBackoff.String(),
		"CHAOS_MAX_BACKOFF=" + e.relay.maxBackoff.String(), "CHAOS_PUBLISH_TIMEOUT=" + e.relay.publishTimeout.String(),
		"CHAOS_LEASE=" + e.relay.lease.String()}
}

func quiet() *slog.Logger {
	if os.Getenv("CHAOS_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// crashAfterAck publishes, then now and then kills its own process before the
// relay can mark what the broker acknowledged: the fault point between ack and
// mark.
type crashAfterAck struct {
	message.Publisher
	oneIn int
}

func (c crashAfterAck) Publish(topic string, msgs ...*message.Message) error {
	err := c.Publisher.Publish(topic, msgs...)
	if err == nil {
		c.maybeCrash()
	}
	return err
}

func (c crashAfterAck) maybeCrash() {
	if rand.IntN(c.oneIn) == 0 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// crashAfterAckBatch is crashAfterAck for a publisher with a result per
// message: it kills its process after a call the broker acknowledged a
// message of.
type crashAfterAckBatch struct {
	crashAfterAck
	batch relay.BatchPublisher
}

func (c crashAfterAckBatch) PublishBatch(ctx context.Context, topic string, msgs ...*message.Message) []error {
	errs := c.batch.PublishBatch(ctx, topic, msgs...)
	for _, err := range errs {
		if err == nil {
			c.maybeCrash()
			break
		}
	}
	return errs
}

// poisonKey marks, in an event's metadata, an event the relays' publisher
// always refuses: it must end dead, and be the only kind that does.
const poisonKey = "chaos_poison"

// The errors of the relays' fault injection (refusing), with what some
// brokers' errors carry: a NUL byte and invalid UTF-8 (PostgreSQL's text
// refuses the one, every database the other). refusedPrefix is how the stored
// last_error of a refusal begins.
var (
	errPoisoned = errors.New(poisonedText + " \x00 \xff\xfe")
	errRefused  = errors.New(refusedPrefix + " \x00 \xff")
)

const refusedPrefix = "chaos: topic refused for a while"

// poisonedText begins the error of a poisoned event's refusal.
const poisonedText = "chaos: poisoned event refused"

// partitionedConfig is cfg with retention by partition drop, quickly: 2s
// ranges, kept 3s, maintained every second.
func partitionedConfig(cfg relay.Config) relay.Config {
	cfg.Retention, cfg.DropPartitions, cfg.PartitionInterval, cfg.CleanupInterval = 3*time.Second, true, 2*time.Second, time.Second
	return cfg
}

// refusing is the relays' fault injection in front of the broker: it refuses
// poisoned events always, and every event of the refused topic during the
// refusal windows the orchestrator announces (see refusals), like a broker
// that refuses one stream for a while.
type refusing struct {
	message.Publisher
	topic string // the topic refused in the windows
	win   *refusals
	log   *attemptLog // the attempts to publish scheduled events, written down
}

func (p refusing) Publish(topic string, msgs ...*message.Message) error {
	p.log.note(msgs)
	for _, m := range msgs {
		if m.Metadata.Get(poisonKey) != "" {
			return errPoisoned
		}
	}
	if topic == p.topic && p.win.active(time.Now()) {
		return errRefused
	}
	return p.Publisher.Publish(topic, msgs...)
}

// refusingBatch is refusing for a publisher with a result per message: the
// poisoned messages fail alone, the others go to the broker.
type refusingBatch struct {
	refusing
	batch relay.BatchPublisher
}

func (p refusingBatch) PublishBatch(ctx context.Context, topic string, msgs ...*message.Message) []error {
	p.log.note(msgs)
	errs := make([]error, len(msgs))
	if topic == p.topic && p.win.active(time.Now()) {
		for i := range errs {
			errs[i] = errRefused
		}
		return errs
	}
	var (
		send []*message.Message
		at   []int
	)
	for i, m := range msgs {
		if m.Metadata.Get(poisonKey) != "" {
			errs[i] = fmt.Errorf("%w: %w", relay.ErrRejected, errPoisoned) // as the broker refusing the message
			continue
		}
		send, at = append(send, m), append(at, i)
	}
	if len(send) == 0 {
		return errs
	}
	got := p.batch.PublishBatch(ctx, topic, send...)
	for k, i := range at {
		if k < len(got) {
			errs[i] = got[k]
		} else {
			errs[i] = errors.New("chaos: the publisher returned too few results")
		}
	}
	return errs
}

// relayPublisher is the relays' publisher with the fault injection in front:
// watermill-nats' (broker "nats") or Herald's JetStream, Kafka or RabbitMQ
// publisher ("natsjs", "kafka", "amqp", whose result per message the wrappers
// keep).
func relayPublisher(e env, broker string, oneIn int) (message.Publisher, error) {
	var opts []nats.Option
	if e.id != "1" {
		// No reconnect buffer: while the broker is down, a publish fails at
		// once instead of hanging until PublishTimeout, so these relays retry
		// at the pace of their backoffs (relay 1 keeps the buffer and hangs).
		opts = append(opts, nats.ReconnectBufSize(-1))
	}
	refused := e.topics[len(e.topics)-1]
	attempts := openAttemptLog("relay-" + e.id)
	if broker == "nats" {
		cfg := brokertest.NATSPublisherConfig(e.nats)
		cfg.NatsOptions = append(cfg.NatsOptions, opts...)
		pub, err := wmnats.NewPublisher(cfg, watermill.NopLogger{})
		if err != nil {
			return nil, err
		}
		return crashAfterAck{refusing{Publisher: pub, topic: refused, win: &refusals{file: e.refuseFile}, log: attempts}, oneIn}, nil
	}
	// Herald's publishers, a result per message (relay.BatchPublisher).
	var (
		pub interface {
			message.Publisher
			relay.BatchPublisher
		}
		err error
	)
	switch broker {
	case "natsjs":
		pub, err = natsjs.New(natsjs.Config{URL: e.nats, NATSOptions: opts, AutoProvision: true, Logger: quiet()})
	case "kafka":
		pub, err = kafka.New(kafka.Config{Brokers: []string{e.nats}, Logger: quiet()})
	case "amqp":
		pub, err = newAMQPPublisher(e.nats)
	default:
		return nil, fmt.Errorf("chaos: unknown -broker %q (nats, natsjs, kafka, amqp)", broker)
	}
	if err != nil {
		return nil, err
	}
	ref := refusingBatch{refusing{Publisher: pub, topic: refused, win: &refusals{file: e.refuseFile}, log: attempts}, pub}
	return crashAfterAckBatch{crashAfterAck{ref, oneIn}, ref}, nil
}

// runRelay is a relay process: ordered mode (unordered with -unordered),
// publishing to the chaos broker.
func runRelay(ctx context.Context) error {
	e := childEnv()
	db, err := openDB(e.kind, e.dsn, "chaos_relay_"+e.id)
	if err != nil {
		return err
	}
	oneIn, _ := strconv.Atoi(os.Getenv("CHAOS_CRASH_ONE_IN"))
	pub, err := relayPublisher(e, os.Getenv("CHAOS_BROKER"), max(oneIn, 1))
	if err != nil {
		return err
	}
	rcfg := e.relay.config()
	rcfg.Ordered, rcfg.InstanceID, rcfg.PollInterval = os.Getenv("CHAOS_UNORDERED") != "true", "relay-"+e.id, e.poll
	rcfg.Channel, rcfg.Logger = "chaos", quiet()
	if os.Getenv("CHAOS_PARTITIONS") == "true" {
		rcfg = partitionedConfig(rcfg)
	} else if keep, _ := time.ParseDuration(os.Getenv("CHAOS_KEEP")); keep > 0 {
		rcfg.Retention = keep
	}
	if n, _ := strconv.Atoi(os.Getenv("CHAOS_RELAY_POOL")); n > 0 {
		s, err := db.DB()
		if err != nil {
			return err
		}
		s.SetMaxOpenConns(n)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if os.Getenv("CHAOS_STORAGE") != "wal" {
		r, err := relay.New(db, pub, rcfg)
		if err != nil {
			return err
		}
		return r.Run(ctx)
	}
	// -storage wal: the WAL relay publishes from the slot (one process at
	// a time: the others wait to take over), and, while it streams, runs
	// the table relay of the events it parked (walrelay.Config.Parked),
	// their failures confirmed by its publishes.
	wcfg := walConfig(rcfg.Ordered)
	wcfg.PublishTimeout, wcfg.Logger, wcfg.Parked = e.relay.publishTimeout, quiet(), &rcfg
	wr, err := walrelay.New(e.dsn, pub, wcfg)
	if err != nil {
		return err
	}
	return wr.Run(ctx)
}

// walConfig is the WAL relay's configuration in -storage wal (the run's
// own server: one slot).
func walConfig(ordered bool) walrelay.Config {
	return walrelay.Config{Slot: "chaos", Publication: "chaos", Ordered: ordered,
		RetryInterval: 200 * time.Millisecond, StatusInterval: time.Second}
}

// runConsumer is a consumer process: a router with the inbox, writing one
// effect per event.
func runConsumer(ctx context.Context) error {
	e := childEnv()
	db, err := openDB(e.kind, e.dsn, "chaos_consumer_"+e.id)
	if err != nil {
		return err
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{DisableAutoCreate: true})); err != nil {
		return err
	}
	// One inbox consumer for all the handlers of a topic.
	in, err := inbox.New(db, inbox.Config{DisableAutoCreate: true, Logger: quiet(), Consumer: "effects"})
	if err != nil {
		return err
	}
	// 8 at once (NATS; Kafka: one per partition); the inbox serializes duplicates.
	kind := brokerKind(os.Getenv("CHAOS_BROKER"))
	sub, err := newSubscriber(kind, e.nats, "consumers", 8)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddMiddleware(in.Middleware)
	consumer := "consumer-" + e.id
	handlers := 1
	if kind == "amqp" {
		handlers = 4 // watermill-amqp handles one message at a time per subscription
	}
	for _, topic := range e.topics {
		for i := range handlers {
			router.AddConsumerHandler(fmt.Sprintf("effects_%s_%d", topic, i), topic, sub, func(msg *message.Message) error {
				var d Deposited
				if err := json.Unmarshal(msg.Payload, &d); err != nil {
					return err
				}
				return inbox.Tx(msg.Context()).Create(&Effect{EventID: msg.UUID, AccountID: d.AccountID.String(), Version: d.Version, Consumer: consumer}).Error
			})
		}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return router.Run(ctx)
}
