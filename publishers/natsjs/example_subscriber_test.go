package natsjs_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/publishers/natsjs"
)

// A consumer ("shipping") subscribes to a topic Publisher publishes to. Its
// durable consumer outlives the process: a message whose handler had not
// acked when the process stopped is delivered again after AckWait, to any
// instance of the consumer. Behind the inbox, Watermill's router acks once
// the handler's transaction committed.
func ExampleNewSubscriber() {
	url := "nats://127.0.0.1:4222"
	if v := os.Getenv("HERALD_TEST_NATS_URL"); v != "" {
		url = v
	}
	if err := subscribeExample(url); err != nil {
		log.Fatal(err)
	}
	// Output: {"order_id":"42"}
}

func subscribeExample(url string) error {
	const topic = "herald_natsjs_example_subscriber" // the stream's name and subject
	defer deleteStream(url, topic)

	// README:subscriber
	sub, err := natsjs.NewSubscriber(natsjs.SubscriberConfig{
		URL:           url,
		Consumer:      "shipping",       // durable consumer and queue group
		AckWait:       30 * time.Second, // longer than a handler takes (the default)
		AutoProvision: true,             // the topic's stream, named as the publisher names it
	})
	if err != nil {
		return err
	}
	// README:end
	defer func() { _ = sub.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	messages, err := sub.Subscribe(ctx, topic) // or router.AddConsumerHandler(..., topic, sub, ...)
	if err != nil {
		return err
	}

	pub, err := natsjs.New(natsjs.Config{URL: url, AutoProvision: true})
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close() }()
	if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":"42"}`))); err != nil {
		return err
	}

	msg := <-messages
	fmt.Println(string(msg.Payload))
	msg.Ack() // after the handler's effects are committed
	return nil
}
