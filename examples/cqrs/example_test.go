package cqrs_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// Order is the aggregate; OrderPlaced the event, an ordinary struct.
type Order struct {
	ID    string `gorm:"primaryKey"`
	Total int
	aggregate.Root
}

type OrderPlaced struct {
	OrderID string `json:"order_id"`
	Total   int    `json:"total"`
}

func (OrderPlaced) EventType() string { return "order.placed" }

// openSQLite opens an SQLite file in a temporary directory; done removes it.
func openSQLite() (db *gorm.DB, done func()) {
	dir, err := os.MkdirTemp("", "herald-cqrs-")
	if err != nil {
		log.Fatal(err)
	}
	dsn := "file:" + filepath.Join(dir, "x.db") + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err = gorm.Open(sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	return db, func() {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
		_ = os.RemoveAll(dir)
	}
}

// runUntil runs the relay and the router until handled is closed or 10 s pass.
func runUntil(r *relay.Relay, router *message.Router, handled <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		log.Fatal("not handled in time")
	}
}

// Herald -> CQRS: a cqrs.EventProcessor handler receives the events the relay
// publishes as the application's own structs. inbox.CQRSMarshaler routes them
// by their Herald type; the inbox middleware gives the handler exactly-once
// effects, as for any Watermill handler.
func Example_heraldToEventProcessor() {
	db, done := openSQLite()
	defer done()
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	r, err := relay.New(db, pubSub, relay.Config{PollInterval: 50 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	topic := func(*events.Envelope) string { return "orders" }
	if err := db.Use(outboxhook.New(outboxhook.Config{Topic: topic, Notify: r.Wake})); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(db, inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	router.AddMiddleware(in.Middleware)
	processor, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) { return "orders", nil },
		SubscriberConstructor: func(cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return pubSub, nil
		},
		Marshaler: inbox.CQRSMarshaler{},
	})
	if err != nil {
		log.Fatal(err)
	}
	handled := make(chan struct{})
	err = processor.AddHandlers(cqrs.NewEventHandler("billing", func(ctx context.Context, e *OrderPlaced) error {
		fmt.Println("billing got", e.OrderID, e.Total)
		close(handled)
		return nil
	}))
	if err != nil {
		log.Fatal(err)
	}

	o := &Order{ID: "o-1", Total: 1500}
	o.Record(OrderPlaced{OrderID: o.ID, Total: o.Total})
	if err := db.Create(o).Error; err != nil {
		log.Fatal(err)
	}
	runUntil(r, router, handled)
	// Output: billing got o-1 1500
}

// EventBus -> Herald: consumers written for a cqrs.EventBus with
// cqrs.JSONMarshaler (routing by the "name" metadata key, the struct's fully
// qualified name) keep working unchanged when the publisher moves to Herald:
// outboxhook.Config.EventMetadata stores the name the marshaler expects, and
// the topic is the one the EventBus used.
func Example_eventBusConsumersUnchanged() {
	db, done := openSQLite()
	defer done()
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	marshaler := cqrs.JSONMarshaler{} // what the consumers already use

	// The consumer, as it was written for the EventBus: untouched.
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	processor, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return p.EventName, nil // the EventBus published each event to its name
		},
		SubscriberConstructor: func(cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return pubSub, nil
		},
		Marshaler: marshaler,
	})
	if err != nil {
		log.Fatal(err)
	}
	handled := make(chan struct{})
	err = processor.AddHandlers(cqrs.NewEventHandler("shipping", func(ctx context.Context, e *OrderPlaced) error {
		fmt.Println("shipping got", e.OrderID, e.Total)
		close(handled)
		return nil
	}))
	if err != nil {
		log.Fatal(err)
	}

	// The publisher, now on Herald: the event's name as the marshaler writes
	// it, and the topic the EventBus used (that name).
	r, err := relay.New(db, pubSub, relay.Config{PollInterval: 50 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	err = db.Use(outboxhook.New(outboxhook.Config{
		EventMetadata: func(e events.Event) events.Metadata { return events.Metadata{"name": marshaler.Name(e)} },
		Topic:         func(env *events.Envelope) string { return env.Metadata["name"] },
		Notify:        r.Wake,
	}))
	if err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		log.Fatal(err)
	}
	o := &Order{ID: uuid.NewString()[:8], Total: 990}
	o.Record(OrderPlaced{OrderID: "o-2", Total: o.Total})
	if err := db.Create(o).Error; err != nil {
		log.Fatal(err)
	}
	runUntil(r, router, handled)
	// Output: shipping got o-2 990
}
