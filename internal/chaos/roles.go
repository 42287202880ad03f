package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/brokertest"
	"github.com/heraldgo/herald/internal/pgtest"
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

// env is what the orchestrator hands its child processes.
type env struct{ dsn, nats, topic, id string }

func childEnv() env {
	return env{os.Getenv("CHAOS_DSN"), os.Getenv("CHAOS_NATS"), os.Getenv("CHAOS_TOPIC"), os.Getenv("CHAOS_ID")}
}

func (e env) vars() []string {
	return []string{"CHAOS_DSN=" + e.dsn, "CHAOS_NATS=" + e.nats, "CHAOS_TOPIC=" + e.topic, "CHAOS_ID=" + e.id}
}

func openDB(dsn, app string) (*gorm.DB, error) {
	return pgtest.OpenPool(pgtest.WithHost(dsn, "", app))
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

// runRelay is a relay process: ordered mode, publishing to the chaos broker.
func runRelay(ctx context.Context) error {
	e := childEnv()
	db, err := openDB(e.dsn, "chaos_relay_"+e.id)
	if err != nil {
		return err
	}
	cfg := brokertest.NATSPublisherConfig(e.nats)
	pub, err := wmnats.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		return err
	}
	oneIn, _ := strconv.Atoi(os.Getenv("CHAOS_CRASH_ONE_IN"))
	r, err := relay.New(db, crashAfterAck{pub, max(oneIn, 1)}, relay.Config{
		Ordered: true, InstanceID: "relay-" + e.id, PollInterval: 200 * time.Millisecond,
		PublishTimeout: time.Second, LeaseDuration: 3 * time.Second, Channel: "chaos",
		MinBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second, Logger: quiet(),
	})
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
	db, err := openDB(e.dsn, "chaos_consumer_"+e.id)
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
	router.AddNoPublisherHandler("effects", e.topic, sub, func(msg *message.Message) error {
		var d Deposited
		if err := json.Unmarshal(msg.Payload, &d); err != nil {
			return err
		}
		return inbox.Tx(msg.Context()).Create(&Effect{EventID: msg.UUID, AccountID: d.AccountID.String(), Version: d.Version, Consumer: consumer}).Error
	})
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return router.Run(ctx)
}
