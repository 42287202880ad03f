// Command orders is Herald's example service. Orders are placed and paid
// through an aggregate that records events; each save writes the order row and
// its events in one transaction. A relay in the same process publishes the
// events; a shipping consumer behind the inbox reacts to OrderPaid by saving a
// shipment, whose own event goes through the outbox too.
//
//	go run ./examples/orders                     # SQLite in a temporary directory, Watermill's GoChannel
//	go run ./examples/orders -broker nats        # NATS JetStream at 127.0.0.1:4222
//	go run ./examples/orders -broker rabbitmq    # RabbitMQ at 127.0.0.1:5672
//
// With nothing set it needs no server at all: an SQLite file in a temporary
// directory, removed at the end. DATABASE_URL switches the database:
// postgres://user@host:port/db works in a schema of its own, herald_example,
// recreated on each run; mysql://user:password@host:port/db (MySQL 8 or
// MariaDB) in a database of its own, herald_example, recreated on each run.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	natsgo "github.com/nats-io/nats.go"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
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
	schema := flag.String("schema", "herald_example", "PostgreSQL schema, or MySQL database, to (re)create and work in")
	flag.Parse()
	if err := run(context.Background(), *n, *broker, os.Getenv("DATABASE_URL"), *schema); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int, broker, dbURL, schema string) error {
	db, where, closeDB, err := openDatabase(ctx, dbURL, schema)
	if err != nil {
		return err
	}
	defer closeDB()
	fmt.Printf("database: %s; broker: %s\n\n", where, broker)
	pub, sub, closeBroker, err := openBroker(broker)
	if err != nil {
		return err
	}
	defer closeBroker()

	// The relay, in this process: the hook wakes it after each commit.
	var (
		published atomic.Int64
		lastPaid  atomic.Pointer[message.Message]
	)
	r, err := relay.New(db, printing{pub, &published, &lastPaid}, relay.Config{})
	if err != nil {
		return err
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{Topic: topic, Notify: r.Wake})); err != nil {
		return err
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
	go func() { defer close(relayDone); _ = r.Run(ctx) }()
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
	if err := waitFor(10*time.Second, func() bool { return shipped.Load() >= 1 }); err == nil && lastPaid.Load() != nil {
		m := lastPaid.Load()
		fmt.Printf("redelivering %s (a duplicate, as brokers do)\n", m.UUID)
		_ = pub.Publish("herald_example_order_paid", m.Copy())
	}

	written := int64(n + paidOrders)
	if err := waitFor(30*time.Second, func() bool {
		s, err := r.Stats(context.Background())
		return err == nil && s.Pending == 0 && shipped.Load() == int64(paidOrders) && delivered.Load() > int64(paidOrders)
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
				SubscribeOptions: []natsgo.SubOpt{natsgo.DeliverNew(), natsgo.AckExplicit()}}}
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

// rootCause returns the short reason behind a connection error, not a
// driver's chain.
func rootCause(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	var sysErr *os.SyscallError
	if errors.As(err, &sysErr) {
		return sysErr.Err.Error()
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return netErr.Err.Error()
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// openDatabase opens GORM on the database dbURL names, or on an SQLite file in
// a temporary directory when it is empty, in a schema (PostgreSQL) or database
// (MySQL) of its own. It says in one line why a server could not be reached.
func openDatabase(ctx context.Context, dbURL, schema string) (db *gorm.DB, where string, closeDB func(), err error) {
	cfg := &gorm.Config{Logger: logger.Discard}
	switch {
	case dbURL == "":
		dir, err := os.MkdirTemp("", "herald-example-")
		if err != nil {
			return nil, "", nil, err
		}
		path := filepath.Join(dir, "orders.db")
		// WAL: readers do not block the writer; _txlock=immediate: a write
		// transaction takes SQLite's one write lock when it begins, and waits
		// for it up to the busy timeout, instead of failing later.
		dsn := "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
		db, err := gorm.Open(sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}), cfg)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, "", nil, err
		}
		return db, "SQLite " + path, func() { closeGORM(db); _ = os.RemoveAll(dir) }, nil
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		db, err := openPostgres(ctx, dbURL, schema, cfg)
		if err != nil {
			return nil, "", nil, err
		}
		return db, "PostgreSQL, schema " + schema, func() { closeGORM(db) }, nil
	case strings.HasPrefix(dbURL, "mysql://"):
		db, err := openMySQL(ctx, dbURL, schema, cfg)
		if err != nil {
			return nil, "", nil, err
		}
		return db, "MySQL, database " + schema, func() { closeGORM(db) }, nil
	}
	return nil, "", nil, fmt.Errorf("DATABASE_URL %q: want postgres://..., mysql://... or nothing (SQLite)", dbURL)
}

func closeGORM(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		_ = s.Close()
	}
}

// openPostgres recreates schema and opens GORM in it.
func openPostgres(ctx context.Context, dbURL, schema string, cfg *gorm.Config) (*gorm.DB, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL is not a URL: %w", err)
	}
	admin, err := sql.Open("pgx", dbURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := admin.PingContext(pctx); err != nil {
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %s (unset DATABASE_URL to run on SQLite)", u.Host, rootCause(err))
	}
	if _, err := admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE; CREATE SCHEMA `+schema); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := gorm.Open(postgres.Open(u.String()), cfg)
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxIdleConns(16) // database/sql keeps 2 by default: every extra statement would reconnect
	return db, nil
}

// openMySQL recreates database name and opens GORM in it. mysql://user:pw@host:port/db
// becomes go-sql-driver's user:pw@tcp(host:port)/name, with clientFoundRows=true
// (Herald needs an UPDATE to report the rows it matched), parseTime and UTC.
func openMySQL(ctx context.Context, dbURL, name string, cfg *gorm.Config) (*gorm.DB, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL is not a URL: %w", err)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":3306"
	}
	dsn := func(db string) string {
		q := u.Query()
		q.Set("clientFoundRows", "true")
		q.Set("parseTime", "true")
		q.Set("loc", "UTC")
		return u.User.String() + "@tcp(" + host + ")/" + db + "?" + q.Encode()
	}
	admin, err := sql.Open("mysql", dsn(""))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := admin.PingContext(pctx); err != nil {
		return nil, fmt.Errorf("cannot reach MySQL at %s: %s (unset DATABASE_URL to run on SQLite)", host, rootCause(err))
	}
	for _, q := range []string{"DROP DATABASE IF EXISTS `" + name + "`", "CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return gorm.Open(mysql.Open(dsn(name)), cfg)
}
