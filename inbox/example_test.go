package inbox_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
)

type Shipment struct {
	ID      uint `gorm:"primaryKey"`
	OrderID string
}

// The handler's write and the inbox row commit together: a redelivered message
// is acknowledged without running the handler again.
func Example() {
	db := pgtest.ScratchDB() // gorm.Open(postgres.Open(dsn), &gorm.Config{})
	if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Shipment{}); err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(db, inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}

	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	router.AddMiddleware(in.Middleware)
	handled := make(chan string, 10)
	router.AddConsumerHandler("ship-order", "orders", pubSub, func(msg *message.Message) error {
		tx := inbox.Tx(msg.Context()) // the inbox's transaction
		handled <- msg.UUID
		return tx.Create(&Shipment{OrderID: string(msg.Payload)}).Error
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	msg := message.NewMessage("0193a5d2-7c1e-7b1a-9a0e-4f1c2d3e4f50", []byte("order-1"))
	_ = pubSub.Publish("orders", msg)
	_ = pubSub.Publish("orders", msg.Copy()) // delivered again
	fmt.Println("handled", <-handled)

	var shipments int64
	for shipments == 0 {
		db.Model(&Shipment{}).Count(&shipments)
	}
	_ = router.Close()
	db.Model(&Shipment{}).Count(&shipments)
	fmt.Println("shipments:", shipments, "handler calls:", 1+len(handled))
	// Output:
	// handled 0193a5d2-7c1e-7b1a-9a0e-4f1c2d3e4f50
	// shipments: 1 handler calls: 1
}

// RefundRequested is an event of one intent per order: its deduplication key
// (events.Deduplicated), which the outbox hook stores in its metadata.
// README:dedupkey
type RefundRequested struct{ OrderID string }

func (RefundRequested) EventType() string  { return "refund.requested" }
func (r RefundRequested) DedupKey() string { return "refund:" + r.OrderID } // events.Deduplicated
// README:end

// Two events of one intent (a command retried after a timeout wrote a second
// one, with a new id) take effect once: the inbox deduplicates a message that
// carries a deduplication key by (consumer, key).
func Example_dedupKey() {
	db := pgtest.ScratchDB() // gorm.Open(postgres.Open(dsn), &gorm.Config{})
	in, err := inbox.New(db, inbox.Config{Consumer: "refunds"})
	if err != nil {
		log.Fatal(err)
	}
	refunds := 0
	h := in.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		refunds++ // the handler's writes go through inbox.Tx(msg.Context())
		return nil, nil
	})
	for range 2 {
		// What the relay delivers: a new id each time, the key in the metadata
		// (events.MetaDedupKey, stored by the outbox hook).
		msg := message.NewMessage(events.NewID().String(), []byte(`{"OrderID":"42"}`))
		for k, v := range events.DedupMetadata(RefundRequested{OrderID: "42"}) {
			msg.Metadata.Set(k, v)
		}
		if _, err := h(msg); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("refunds:", refunds)
	// Output:
	// refunds: 1
}

// A consumer renamed with its former name listed (FormerConsumers) takes a
// message the former name handled for a duplicate.
func Example_renamedConsumer() {
	db := pgtest.ScratchDB()
	calls := 0
	handler := func(msg *message.Message) ([]*message.Message, error) { calls++; return nil, nil }
	msg := message.NewMessage("0193a5d2-7c1e-7b1a-9a0e-4f1c2d3e4f51", nil)

	before, err := inbox.New(db, inbox.Config{Consumer: "ship"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := before.Middleware(handler)(msg.Copy()); err != nil {
		log.Fatal(err)
	}
	after, err := inbox.New(db, inbox.Config{
		Consumer:        "shipping",
		FormerConsumers: map[string][]string{"shipping": {"ship"}},
		Logger:          slog.New(slog.DiscardHandler), // New warns: no rows under "shipping" yet
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := after.Middleware(handler)(msg.Copy()); err != nil { // redelivered
		log.Fatal(err)
	}
	fmt.Println("handler calls:", calls)
	// Output:
	// handler calls: 1
}
