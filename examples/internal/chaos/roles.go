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
	"github.com/heraldgo/herald/relay"
)

// Account is the chaos run's aggregate: every save records Deposited with the
// account's next version, so a consumer can tell the order.
type Account struct {
	ID      uuid.UUID `gorm:"type:uuid;primaryKey"`
	Version int
	aggregate.Root
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
	if err == nil && rand.IntN(c.oneIn) == 0 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return err
}

// poisonKey marks, in an event's metadata, an event the relays' publisher
// always refuses: it must end dead, and be the only kind that does.
const poisonKey = "chaos_poison"

// The errors of the relays' fault injection (refusing), with what some
// brokers' errors carry: a NUL byte and invalid UTF-8 (PostgreSQL's text
// refuses the one, every database the other). refusedPrefix is how the stored
// last_error of a refusal begins.
var (
	errPoisoned = errors.New("chaos: poisoned event refused \x00 \xff\xfe")
	errRefused  = errors.New(refusedPrefix + " \x00 \xff")
)

const refusedPrefix = "chaos: topic refused for a while"

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
}

func (p refusing) Publish(topic string, msgs ...*message.Message) error {
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

// runRelay is a relay process: ordered mode (unordered with -unordered),
// publishing to the chaos broker.
func runRelay(ctx context.Context) error {
	e := childEnv()
	db, err := openDB(e.kind, e.dsn, "chaos_relay_"+e.id)
	if err != nil {
		return err
	}
	cfg := brokertest.NATSPublisherConfig(e.nats)
	if e.id != "1" {
		// No reconnect buffer: while the broker is down, a publish fails at
		// once instead of hanging until PublishTimeout, so these relays retry
		// at the pace of their backoffs (relay 1 keeps the buffer and hangs).
		cfg.NatsOptions = append(cfg.NatsOptions, nats.ReconnectBufSize(-1))
	}
	pub, err := wmnats.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		return err
	}
	oneIn, _ := strconv.Atoi(os.Getenv("CHAOS_CRASH_ONE_IN"))
	rcfg := e.relay.config()
	rcfg.Ordered, rcfg.InstanceID, rcfg.PollInterval = os.Getenv("CHAOS_UNORDERED") != "true", "relay-"+e.id, e.poll
	rcfg.Channel, rcfg.Logger = "chaos", quiet()
	if os.Getenv("CHAOS_PARTITIONS") == "true" {
		rcfg = partitionedConfig(rcfg)
	}
	if n, _ := strconv.Atoi(os.Getenv("CHAOS_RELAY_POOL")); n > 0 {
		s, err := db.DB()
		if err != nil {
			return err
		}
		s.SetMaxOpenConns(n)
	}
	pubs := refusing{Publisher: pub, topic: e.topics[len(e.topics)-1], win: &refusals{file: e.refuseFile}}
	r, err := relay.New(db, crashAfterAck{pubs, max(oneIn, 1)}, rcfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return r.Run(ctx)
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
	in, err := inbox.New(db, inbox.Config{DisableAutoCreate: true, Logger: quiet()})
	if err != nil {
		return err
	}
	scfg := brokertest.NATSSubscriberConfig(e.nats, "chaos_consumers")
	scfg.SubscribersCount = 8 // handle messages concurrently; the inbox serializes duplicates
	sub, err := wmnats.NewSubscriber(scfg, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddMiddleware(in.Middleware)
	consumer := "consumer-" + e.id
	for _, topic := range e.topics {
		router.AddConsumerHandler("effects_"+topic, topic, sub, func(msg *message.Message) error {
			var d Deposited
			if err := json.Unmarshal(msg.Payload, &d); err != nil {
				return err
			}
			return inbox.Tx(msg.Context()).Create(&Effect{EventID: msg.UUID, AccountID: d.AccountID.String(), Version: d.Version, Consumer: consumer}).Error
		})
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return router.Run(ctx)
}
