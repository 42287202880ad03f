package inbox_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

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
