// Command orders is Herald's example service. Orders are placed and paid
// through an aggregate that records events; each save writes the order row and
// its events in one transaction. A relay in the same process publishes the
// events; a shipping consumer behind the inbox reacts to OrderPaid by saving a
// shipment, whose own event goes through the outbox too; an audit consumer
// reads every topic.
//
//	go run ./examples/orders                     # SQLite in a temporary directory, Watermill's GoChannel
//	go run ./examples/orders -broker nats        # NATS JetStream at 127.0.0.1:4222 (NATS_URL)
//	go run ./examples/orders -broker rabbitmq    # RabbitMQ at 127.0.0.1:5672 (AMQP_URL)
//	go run ./examples/orders -broker kafka       # Kafka at 127.0.0.1:9092 (KAFKA_BROKERS)
//	DATABASE_URL=postgres://... go run ./examples/orders -storage wal
//
// With a broker, the relay publishes through Herald's publisher for it
// (publishers/natsjs, publishers/amqp, publishers/kafka: Publish returns only
// once the broker stored the message), and each consumer reads through
// Watermill's subscriber set up to match it: natsSubscriber, amqpSubscriber
// and kafkaSubscriber in brokers.go, each setting explained. The topics are
// the example's own, named after -schema (herald_example_order_paid, ...);
// a run starts by deleting the NATS streams or RabbitMQ exchanges and
// queues of those names that an earlier run left, and says so. Kafka topics
// are created when missing.
//
// With nothing set it needs no server at all: an SQLite file in a temporary
// directory, removed at the end. DATABASE_URL switches the database:
// postgres://user@host:port/db works in a schema of its own, herald_example;
// mysql://user:password@host:port/db (MySQL 8 or MariaDB) in a database of
// its own, herald_example. That schema or database is DROPPED and recreated
// on each run, and the run says so first. A run marks what it creates (a
// table herald_example_owner in it) and refuses to drop a schema or database
// of that name it did not create (one that holds tables but no mark): pick
// another -schema, or drop it yourself.
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
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
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

// eventTypes are the example's events, one topic each.
var eventTypes = []string{OrderPlaced{}.EventType(), OrderPaid{}.EventType(), ShipmentCreated{}.EventType()}

// topicOf maps an event type to its topic: the prefix (the -schema name)
// and the type with dots replaced, since JetStream stream names (one per
// topic) allow no dots.
func topicOf(prefix, eventType string) string {
	return prefix + "_" + strings.ReplaceAll(eventType, ".", "_")
}

func main() {
	n := flag.Int("orders", 5, "orders to place")
	broker := flag.String("broker", "gochannel", "gochannel, nats, rabbitmq or kafka")
	schema := flag.String("schema", "herald_example", "PostgreSQL schema, or MySQL database, to DROP, recreate and work in (only one this example created); "+
		"the topics' prefix; -storage wal: the slot's and publication's name too")
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
	if err := claimSchema(ctx, dbURL, schema); err != nil {
		return err
	}
	db, where, closeDB, err := exampledb.Open(ctx, dbURL, schema)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := markSchema(db); err != nil {
		return err
	}
	if storage == "wal" && db.Name() != "postgres" {
		return errors.New("-storage wal needs PostgreSQL (DATABASE_URL=postgres://...) at wal_level=logical")
	}
	var topics []string
	for _, t := range eventTypes {
		topics = append(topics, topicOf(schema, t))
	}
	topic := func(env *events.Envelope) string { return topicOf(schema, env.Type) }
	paidTopic := topicOf(schema, OrderPaid{}.EventType())
	b, err := openBroker(ctx, broker, topics)
	if err != nil {
		return err
	}
	defer b.close()
	fmt.Printf("database: %s; storage: %s; broker: %s\n\n", where, storage, broker)

	// The relay, in this process: the hook wakes it after each commit; or,
	// in WAL mode, the WAL relay, which streams the events as they commit.
	var (
		published atomic.Int64
		relayed   = printing{b.pub, &published}
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

	// The consumers, behind the inbox, each through a subscriber of its own
	// (its queue, durable consumer or consumer group on the broker).
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
	shippingSub, err := b.sub("shipping")
	if err != nil {
		return err
	}
	auditSub, err := b.sub("audit")
	if err != nil {
		return err
	}
	defer func() { _ = shippingSub.Close(); _ = auditSub.Close() }()
	var delivered, shipped, audited atomic.Int64
	var crashed atomic.Bool
	shipping := router.AddConsumerHandler("shipping", paidTopic, shippingSub, func(msg *message.Message) error {
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
	// Brokers deliver at least once: the first message shipping handles is
	// lost before its ack, as in a crash right after the commit, and the
	// broker delivers it again; the inbox skips the copy.
	shipping.AddMiddleware(counting(&delivered), crashingOnce(&crashed), in.Middleware)
	for _, t := range topics { // the audit consumer reads every topic
		router.AddConsumerHandler("audit_"+t, t, auditSub, func(msg *message.Message) error {
			audited.Add(1)
			return nil
		}).AddMiddleware(in.Middleware)
	}

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

	written := int64(n + paidOrders)
	flowed := func() bool { // every event published: the outbox is empty, or the WAL relay published them all
		if r == nil {
			return published.Load() >= written+shipped.Load()
		}
		s, err := r.Stats(context.Background())
		return err == nil && s.Pending == 0
	}
	if err := waitFor(30*time.Second, func() bool {
		return flowed() && shipped.Load() == int64(paidOrders) && delivered.Load() > int64(paidOrders) &&
			audited.Load() == written+shipped.Load()
	}); err != nil {
		return fmt.Errorf("the events did not all flow within 30s (is the broker up?)")
	}
	cancel()
	<-routerDone
	<-relayDone

	var shipments int64
	db.Model(&Shipment{}).Count(&shipments)
	fmt.Printf("\nsummary: %d orders (%d paid), %d events written by orders + %d by shipping, %d published, "+
		"%d consumed by shipping, %d duplicate skipped, %d shipments, %d events consumed by audit\n",
		n, paidOrders, written, shipped.Load(), published.Load(), shipped.Load(), delivered.Load()-shipped.Load(), shipments, audited.Load())
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

// printing prints what the relay publishes and counts it. It is a
// relay.BatchPublisher as Herald's publishers are, so that the relay still
// pipelines its publishes and retries only the messages that failed.
type printing struct {
	message.Publisher
	n *atomic.Int64
}

var _ relay.BatchPublisher = printing{}

func (p printing) Publish(topic string, msgs ...*message.Message) error {
	return errors.Join(p.PublishBatch(context.Background(), topic, msgs...)...)
}

func (p printing) PublishBatch(ctx context.Context, topic string, msgs ...*message.Message) []error {
	var errs []error
	if bp, ok := p.Publisher.(relay.BatchPublisher); ok {
		errs = bp.PublishBatch(ctx, topic, msgs...)
	} else {
		errs = make([]error, len(msgs))
		if err := p.Publisher.Publish(topic, msgs...); err != nil {
			for i := range errs {
				errs[i] = err
			}
		}
	}
	for i, m := range msgs {
		if i < len(errs) && errs[i] == nil {
			p.n.Add(1)
			fmt.Printf("  relay: published %s %s\n", m.Metadata.Get(events.MetaType), m.UUID)
		}
	}
	return errs
}

// crashingOnce fails the first message whose handler succeeded, after its
// commit, as a consumer that crashed before its ack would: the subscriber
// nacks it and the broker delivers it again.
func crashingOnce(done *atomic.Bool) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil && done.CompareAndSwap(false, true) {
				fmt.Printf("  shipping: committed %s, then lost it before the ack (as in a crash): the broker delivers it again\n", msg.UUID)
				return nil, errors.New("lost before the ack")
			}
			return out, err
		}
	}
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
