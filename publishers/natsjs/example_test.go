package natsjs_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/publishers/natsjs"
	"github.com/heraldgo/herald/relay"
)

// Order is the example's aggregate; Placed its event.
type Order struct {
	ID string `gorm:"type:varchar(36);primaryKey"`
	aggregate.Root
}

// Placed is the event an Order records.
type Placed struct{ OrderID string }

// EventType names the event.
func (Placed) EventType() string { return "order.placed" }

// The relay publishes through natsjs to JetStream, pipelined, in ordered
// mode; a consumer's Subscriber (watermill-nats' with NATSMarshaler) reads
// the events, the event id as the message UUID.
func Example() {
	dir, err := os.MkdirTemp("", "natsjs-example")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	url := "nats://127.0.0.1:4222"
	if v := os.Getenv("HERALD_TEST_NATS_URL"); v != "" {
		url = v
	}
	// gorm.Open(postgres.Open(dsn), &gorm.Config{}) in an application. On
	// SQLite Herald needs WAL, immediate write transactions and a busy timeout.
	dsn := "file:" + filepath.Join(dir, "app.db") + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := gorm.Open(sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	const topic = "herald_natsjs_example_orders" // the stream's name and subject
	defer deleteStream(url, topic)

	pub, err := natsjs.New(natsjs.Config{URL: url, AutoProvision: true})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = pub.Close() }()
	r, err := relay.New(db, pub, relay.Config{Ordered: true})
	if err != nil {
		log.Fatal(err)
	}
	hook := outboxhook.New(outboxhook.Config{Notify: r.Wake, Topic: func(*events.Envelope) string { return topic },
		// The server's max_payload bounds payload and headers together: the
		// save refuses what the server would refuse at every publish.
		MaxPayloadBytes: pub.MaxPayloadBytes()})
	if err := db.Use(hook); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		log.Fatal(err)
	}

	// The consumer's subscriber: a durable consumer of the example's name on the
	// topic's stream, acked by hand once the handler committed.
	sub, err := natsjs.NewSubscriber(natsjs.SubscriberConfig{URL: url, Consumer: "herald_natsjs_example", AutoProvision: true})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	messages, err := sub.Subscribe(ctx, topic)
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx) // until cancel
	}()

	o := &Order{ID: uuid.NewString()}
	o.Record(Placed{OrderID: o.ID})
	eventID := o.Records()[0].ID
	if err := db.Create(o).Error; err != nil {
		log.Fatal(err)
	}

	msg := <-messages
	msg.Ack()
	fmt.Println(msg.Metadata.Get(events.MetaType), msg.UUID == eventID.String())
	cancel()
	<-done
	// Output: order.placed true
}

// deleteStream deletes the example's stream (and its consumers).
func deleteStream(url, name string) {
	nc, err := nats.Connect(url)
	if err != nil {
		return
	}
	defer nc.Close()
	if js, err := jetstream.New(nc); err == nil {
		_ = js.DeleteStream(context.Background(), name)
	}
}
