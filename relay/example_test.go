package relay_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// The relay runs in the writer's process: the hook wakes it after each commit.
func Example() {
	db := pgtest.ScratchDB()                                                    // gorm.Open(postgres.Open(dsn), &gorm.Config{})
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}) // or NATS, RabbitMQ, Kafka, ...

	r, err := relay.New(db, pubSub, relay.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake})); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Account{}); err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	messages, err := pubSub.Subscribe(ctx, "account.deposited")
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx) // until cancel
	}()

	a := &Account{ID: uuid.New()}
	a.Record(Deposited{AccountID: a.ID, Seq: 1})
	eventID := a.Records()[0].ID
	if err := db.Create(a).Error; err != nil {
		log.Fatal(err)
	}

	msg := <-messages
	msg.Ack()
	fmt.Println(msg.Metadata.Get(events.MetaType), msg.UUID == eventID.String())
	cancel()
	<-done
	// Output: account.deposited true
}
