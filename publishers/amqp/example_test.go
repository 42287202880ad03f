package amqp_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/publishers/amqp"
)

// A Publisher beside a watermill-amqp subscriber with the durable pub/sub
// config; the relay would be given the Publisher: relay.New(db, pub,
// relay.Config{}).
func Example() {
	url := "amqp://guest:guest@127.0.0.1:5672/"
	if v := os.Getenv("HERALD_TEST_AMQP_URL"); v != "" {
		url = v
	}
	topic := fmt.Sprintf("herald_example_%d_%d", os.Getpid(), time.Now().UnixNano())
	defer deleteTopology(url, topic, topic+"_example")

	sub, err := wmamqp.NewSubscriber(wmamqp.NewDurablePubSubConfig(url, wmamqp.GenerateQueueNameTopicNameWithSuffix("example")), watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	received, err := sub.Subscribe(ctx, topic) // declares and binds the queue
	if err != nil {
		log.Fatal(err)
	}

	pub, err := amqp.New(amqp.Config{URL: url, MaxInFlight: 1024})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = pub.Close() }()

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"amount":10}`))
	msg.Metadata.Set("herald_type", "account.deposited")
	errs := pub.PublishBatch(ctx, topic, msg) // one result per message: nil once confirmed
	fmt.Println("confirmed:", errs[0] == nil)

	got := <-received
	got.Ack()
	fmt.Println(got.UUID == msg.UUID, got.Metadata.Get("herald_type"), string(got.Payload))
	// Output:
	// confirmed: true
	// true account.deposited {"amount":10}
}

// deleteTopology deletes the example's queue and exchange.
func deleteTopology(url, exchange, queue string) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	_, _ = ch.QueueDelete(queue, false, false, false)
	_ = ch.ExchangeDelete(exchange, false, false)
}
