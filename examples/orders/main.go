// Command orders is Herald's example service. Orders are placed and paid
// through an aggregate that records events; each save writes the order row and
// its events in one transaction. A relay in the same process publishes the
// events; a shipping consumer behind the inbox reacts to OrderPaid by saving a
// shipment, whose own event goes through the outbox too.
//
//	go run ./examples/orders                     # SQLite in a temporary directory, Watermill's GoChannel
//	go run ./examples/orders -broker nats        # NATS JetStream at 127.0.0.1:4222
//	go run ./examples/orders -broker rabbitmq    # RabbitMQ at 127.0.0.1:5672
//	DATABASE_URL=postgres://... go run ./examples/orders -storage wal
//
// With nothing set it needs no server at all: an SQLite file in a temporary
// directory, removed at the end. DATABASE_URL switches the database:
// postgres://user@host:port/db works in a schema of its own, herald_example,
// recreated on each run; mysql://user:password@host:port/db (MySQL 8 or
// MariaDB) in a database of its own, herald_example, recreated on each run.
//
// -storage wal (PostgreSQL with wal_level=logical, a role with the
// REPLICATION right) keeps the events in the WAL instead of the outbox table
// (outboxhook.StorageWAL) and publishes them with walrelay from a replication
// slot named after the schema (herald_example), with a publication of the
// same name. The slot is made fresh at the start of each run (as herald wal
// setup does) and dropped at the end (herald wal drop): a slot left behind
// with no relay reading it keeps WAL without end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/exampledb"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/walrelay"
)

// Order is an aggregate: a GORM model that embeds aggregate.Root.
type Order struct {
	ID       uuid.UUID `gorm:"type:uuid;primaryKey"`
	Customer string
	Total    int
	Status   string
	aggregate.Root
}

// OrderPlaced is recorded when an order is placed.
type OrderPlaced struct {
	OrderID  uuid.UUID `json:"order_id"`
	Customer string    `json:"customer"`
	Total    int       `json:"total"`
}

func (OrderPlaced) EventType() string { return "order.placed" }

// OrderPaid is recorded when an order is paid.
type OrderPaid struct {
	OrderID uuid.UUID `json:"order_id"`
	Amount  int       `json:"amount"`
}

func (OrderPaid) EventType() string { return "order.paid" }

// PlaceOrder creates an order and records that it was placed.
func PlaceOrder(customer string, total int) *Order {
	o := &Order{ID: uuid.New(), Customer: customer, Total: total, Status: "placed"}
	o.Record(OrderPlaced{OrderID: o.ID, Customer: customer, Total: total})
	return o
}

// Pay marks the order paid and records it.
func (o *Order) Pay() error {
	if o.Status != "placed" {
		return fmt.Errorf("order %s is %s, cannot pay", o.ID, o.Status)
	}
	o.Status = "paid"
	o.Record(OrderPaid{OrderID: o.ID, Amount: o.Total})
	return nil
}

// Shipment is the shipping service's aggregate.
type Shipment struct {
	ID      uuid.UUID `gorm:"type:uuid;primaryKey"`
	OrderID uuid.UUID `gorm:"type:uuid;uniqueIndex"`
	aggregate.Root
}

// ShipmentCreated is recorded when a paid order gets its shipment.
type ShipmentCreated struct {
	ShipmentID uuid.UUID `json:"shipment_id"`
	OrderID    uuid.UUID `json:"order_id"`
}

func (ShipmentCreated) EventType() string { return "shipment.created" }

// topic maps an event to its topic: its type with dots replaced, since
// JetStream stream names (one per topic) allow no dots.
func topic(env *events.Envelope) string {
	return "herald_example_" + strings.ReplaceAll(env.Type, ".", "_")
}

func main() {
	n := flag.Int("orders", 5, "orders to place")
	broker := flag.String("broker", "gochannel", "gochannel, nats or rabbitmq")
	schema := flag.String("schema", "herald_example", "PostgreSQL schema, or MySQL database, to (re)create and work in; -storage wal: the slot's and publication's name too")
	storage := flag.String("storage", "table", "table (the outbox table and relay) or wal (PostgreSQL's WAL and walrelay)")
	flag.Parse()
	if err := run(context.Background(), *n, *broker, *storage, os.Getenv("DATABASE_URL"), *schema); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int, broker, storage, dbURL, schema string) error {
	if storage != "table" && storage != "wal" {
		return fmt.Errorf("unknown -storage %q: table or wal", storage)
	}
	db, where, closeDB, err := exampledb.Open(ctx, dbURL, schema)
	if err != nil {
		return err
	}
	defer closeDB()
	if storage == "wal" && db.Name() != "postgres" {
		return errors.New("-storage wal needs PostgreSQL (DATABASE_URL=postgres://...) at wal_level=logical")
	}
	fmt.Printf("database: %s; storage: %s; broker: %s\n\n", where, storage, broker)
	pub, sub, closeBroker, err := openBroker(broker)
	if err != nil {
		return err
	}
	defer closeBroker()

	// The relay, in this process: the hook wakes it after each commit; or,
	// in WAL mode, the WAL relay, which streams the events as they commit.
	var (
		published atomic.Int64
		lastPaid  atomic.Pointer[message.Message]
		relayed   = printing{pub, &published, &lastPaid}
		r         *relay.Relay
		wr        *walrelay.Relay
	)
	if storage == "table" {
		if r, err = relay.New(db, relayed, relay.Config{}); err != nil {
			return err
		}
		if err := db.Use(outboxhook.New(outboxhook.Config{Topic: topic, Notify: r.Wake})); err != nil {
			return err
		}
	} else {
		var drop func()
		if wr, drop, err = walRelay(ctx, db, dbURL, schema, relayed); err != nil {
			return err
		}
		defer drop()
		if err := db.Use(outboxhook.New(outboxhook.Config{Topic: topic, Storage: outboxhook.StorageWAL})); err != nil {
			return err // outboxhook.ErrWALLevel: set wal_level=logical
		}
	}
	if err := db.AutoMigrate(&Order{}, &Shipment{}); err != nil {
		return err
	}

	// The shipping consumer, behind the inbox.
	in, err := inbox.New(db, inbox.Config{RetryHorizon: relay.Config{}.RetryHorizon()})
	if err != nil {
		return err
	}
	var reg events.Registry
	reg.MustRegister(OrderPaid{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	var delivered, shipped atomic.Int64
	router.AddMiddleware(counting(&delivered), in.Middleware)
	router.AddConsumerHandler("shipping", "herald_example_order_paid", sub, func(msg *message.Message) error {
		e, _, err := inbox.Decode(&reg, msg)
		if err != nil {
			return err
		}
		paid := e.(OrderPaid)
		s := &Shipment{ID: uuid.New(), OrderID: paid.OrderID}
		s.Record(ShipmentCreated{ShipmentID: s.ID, OrderID: paid.OrderID})
		if err := inbox.Tx(msg.Context()).Create(s).Error; err != nil { // its event goes through the outbox
			return err
		}
		shipped.Add(1)
		fmt.Printf("  shipping: order %s paid %d -> shipment %s\n", short(paid.OrderID), paid.Amount, short(s.ID))
		return nil
	})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		if r != nil {
			_ = r.Run(ctx)
		} else if err := wr.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "orders: WAL relay:", err)
		}
	}()
	routerDone := make(chan struct{})
	go func() { defer close(routerDone); _ = router.Run(ctx) }()
	<-router.Running()

	wctx := events.WithMetadata(ctx, events.Metadata{"correlation_id": "example-run"})
	paidOrders := 0
	for i := range n {
		o := PlaceOrder(fmt.Sprintf("customer-%d", i+1), 1000+100*i)
		if err := db.WithContext(wctx).Create(o).Error; err != nil {
			return fmt.Errorf("place order: %w", err)
		}
		fmt.Printf("placed  %s for %s (%d)\n", short(o.ID), o.Customer, o.Total)
		if i%2 == 0 { // every other order is paid at once
			if err := o.Pay(); err != nil {
				return err
			}
			if err := db.WithContext(wctx).Save(o).Error; err != nil {
				return fmt.Errorf("pay order: %w", err)
			}
			paidOrders++
			fmt.Printf("paid    %s\n", short(o.ID))
		}
	}

	// A save that fails leaves neither the row nor its events behind.
	o := PlaceOrder("rolled-back", 1)
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(o).Error; err != nil {
			return err
		}
		return errors.New("payment provider said no")
	})
	fmt.Printf("rolled back %s: %v (nothing written; its event stays on the aggregate)\n", short(o.ID), err)

	// Brokers deliver at least once: simulate a redelivery of a paid event.
	// (Both: the subscriber can ship before the relay's Publish returns and
	// keeps the message.)
	if err := waitFor(10*time.Second, func() bool { return shipped.Load() >= 1 && lastPaid.Load() != nil }); err == nil {
		m := lastPaid.Load()
		fmt.Printf("redelivering %s (a duplicate, as brokers do)\n", m.UUID)
		_ = pub.Publish("herald_example_order_paid", m.Copy())
	}

	written := int64(n + paidOrders)
	flowed := func() bool { // every event published: the outbox is empty, or the WAL relay published them all
		if r == nil {
			return published.Load() >= written+shipped.Load()
		}
		s, err := r.Stats(context.Background())
		return err == nil && s.Pending == 0
	}
	if err := waitFor(30*time.Second, func() bool {
		return flowed() && shipped.Load() == int64(paidOrders) && delivered.Load() > int64(paidOrders)
	}); err != nil {
		return fmt.Errorf("the events did not all flow within 30s (is the broker up?)")
	}
	cancel()
	<-routerDone
	<-relayDone

	var shipments int64
	db.Model(&Shipment{}).Count(&shipments)
	fmt.Printf("\nsummary: %d orders (%d paid), %d events written by orders + %d by shipping, %d published, "+
		"%d consumed, %d duplicate skipped, %d shipments\n",
		n, paidOrders, written, shipped.Load(), published.Load(), shipped.Load(), delivered.Load()-shipped.Load(), shipments)
	return nil
}

// walRelay makes the WAL relay of -storage wal: its slot and publication,
// named after schema, made fresh (dropped first, should a run that did not
// end have left them) before the first event is written; drop drops them.
func walRelay(ctx context.Context, db *gorm.DB, dbURL, schema string, pub message.Publisher) (r *walrelay.Relay, drop func(), err error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, nil, err
	}
	// Parked: the relay retries and dead-letters what the broker refused
	// (parked in the outbox table) itself, while it streams.
	cfg := walrelay.Config{Slot: schema, Publication: schema, Parked: &relay.Config{}}
	if _, err := walrelay.Drop(ctx, sqlDB, cfg); err != nil {
		return nil, nil, err
	}
	r, err = walrelay.New(dbURL, pub, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := r.Setup(ctx); err != nil { // as herald wal setup does
		return nil, nil, err
	}
	drop = func() { // as herald wal drop does
		for range 50 { // the walsender may take a moment to let go of the slot
			if _, err := walrelay.Drop(context.WithoutCancel(ctx), sqlDB, cfg); !errors.Is(err, walrelay.ErrSlotActive) {
				if err != nil {
					fmt.Fprintln(os.Stderr, "orders: drop the WAL slot:", err)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return r, drop, nil
}

// printing prints what the relay publishes, counts it, and keeps the last
// order.paid message, to redeliver it.
type printing struct {
	message.Publisher
	n        *atomic.Int64
	lastPaid *atomic.Pointer[message.Message]
}

func (p printing) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		p.n.Add(1)
		fmt.Printf("  relay: published %s %s\n", m.Metadata.Get(events.MetaType), m.UUID)
		if topic == "herald_example_order_paid" {
			p.lastPaid.Store(m.Copy())
		}
	}
	return nil
}

// counting counts the deliveries that reach the handler chain.
func counting(n *atomic.Int64) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			n.Add(1)
			return h(msg)
		}
	}
}

func openBroker(kind string) (message.Publisher, message.Subscriber, func(), error) {
	logger := watermill.NopLogger{}
	switch kind {
	case "gochannel":
		gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, logger)
		return gc, gc, func() { _ = gc.Close() }, nil
	case "nats":
		url := envOr("NATS_URL", "nats://127.0.0.1:4222")
		pcfg := wmnats.PublisherConfig{URL: url, Marshaler: &wmnats.NATSMarshaler{}, JetStream: wmnats.JetStreamConfig{AutoProvision: true}}
		scfg := wmnats.SubscriberConfig{URL: url, QueueGroupPrefix: "herald_example", SubscribersCount: 1,
			AckWaitTimeout: 5 * time.Second, CloseTimeout: 5 * time.Second, Unmarshaler: &wmnats.NATSMarshaler{},
			JetStream: wmnats.JetStreamConfig{AutoProvision: true, DurablePrefix: "herald_example",
				SubscribeOptions: []natsgo.SubOpt{natsgo.DeliverNew(), natsgo.AckExplicit(), natsgo.ManualAck()}}} // ManualAck: see README, NATS
		pub, err := wmnats.NewPublisher(pcfg, logger)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cannot reach NATS at %s: %w", url, err)
		}
		sub, err := wmnats.NewSubscriber(scfg, logger)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cannot reach NATS at %s: %w", url, err)
		}
		return pub, sub, func() { _ = sub.Close(); _ = pub.Close() }, nil
	case "rabbitmq":
		cfg := amqp.NewDurableQueueConfig(envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"))
		cfg.Publish.ConfirmDelivery = true // else Publish returns before RabbitMQ stored the message
		pub, err := amqp.NewPublisher(cfg, logger)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cannot reach RabbitMQ: %w", err)
		}
		sub, err := amqp.NewSubscriber(cfg, logger)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("cannot reach RabbitMQ: %w", err)
		}
		return pub, sub, func() { _ = sub.Close(); _ = pub.Close() }, nil
	}
	return nil, nil, nil, fmt.Errorf("unknown -broker %q: gochannel, nats or rabbitmq", kind)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func waitFor(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func short(id uuid.UUID) string { return id.String()[:8] }
