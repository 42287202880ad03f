package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/examples/internal/brokertest"
)

// errNoBrokerReference: the publisher has no broker reference (GoChannel,
// discard); the scenario is left out.
var errNoBrokerReference = errors.New("no broker reference for this publisher")

// brokerReference publishes n messages like the outbox's (the same payload
// size, a UUID each) straight to the broker of publisher kind with its
// fastest plain client, pipelined with an ack per message, no database: the
// most the broker takes from one client here. It returns how long it took.
func brokerReference(kind, topic string, n int) (time.Duration, error) {
	switch kind {
	case "nats", "natsjs":
		return natsReference(topic, n)
	case "amqp", "amqp-herald":
		return amqpReference(topic, n)
	case "kafka", "kafka-watermill":
		return kafkaReference(topic, n)
	}
	return 0, errNoBrokerReference
}

// benchPayload is a message payload of the outbox's size.
var benchPayload = []byte(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, 0, strings.Repeat("x", 100)))

// amqpTopology declares what the bench's RabbitMQ publishers publish to: a
// durable fanout exchange named after the topic (watermill-amqp's durable
// pub/sub, and Herald's publishers/amqp default) with a durable queue of the
// same name bound to it, so that every message is routed and stored. The
// returned function deletes both.
func amqpTopology(topic string) (func(), error) {
	conn, err := amqp091.Dial(brokertest.AMQPURL())
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	if err := ch.ExchangeDeclare(topic, "fanout", true, false, false, false, nil); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if _, err := ch.QueueDeclare(topic, true, false, false, false, nil); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if err := ch.QueueBind(topic, "", topic, false, nil); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return func() {
		_, _ = ch.QueueDelete(topic, false, false, false)
		_ = ch.ExchangeDelete(topic, false, false)
		_ = conn.Close()
	}, nil
}

// amqpReference publishes persistent messages on one confirm-mode channel,
// 1,024 unconfirmed at most, and waits for every confirm.
func amqpReference(topic string, n int) (time.Duration, error) {
	drop, err := amqpTopology(topic)
	if err != nil {
		return 0, err
	}
	defer drop()
	conn, err := amqp091.Dial(brokertest.AMQPURL())
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	ctx := context.Background()
	window := make(chan *amqp091.DeferredConfirmation, 1024)
	done := make(chan error, 1)
	go func() {
		for c := range window {
			if ok, err := c.WaitContext(ctx); err != nil || !ok {
				if err == nil {
					err = errors.New("nacked")
				}
				done <- fmt.Errorf("amqp reference: %w", err)
				for range window {
				}
				return
			}
		}
		done <- nil
	}()
	start := time.Now()
	for range n {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, topic, "", false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, MessageId: uuid.NewString(), Body: benchPayload})
		if err != nil {
			close(window)
			return 0, err
		}
		window <- c
	}
	close(window)
	if err := <-done; err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// kafkaReference produces the records straight with franz-go (acks=all,
// idempotent), all in flight at once, and waits for every ack.
func kafkaReference(topic string, n int) (time.Duration, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(4, topic))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		perr error
	)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("agg-%d", i%1000)), Value: benchPayload,
			Headers: []kgo.RecordHeader{{Key: "_watermill_message_uuid", Value: []byte(uuid.NewString())}}},
			func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					perr = err
					mu.Unlock()
				}
				wg.Done()
			})
	}
	wg.Wait()
	return time.Since(start), perr
}

// natsReference publishes with nats.go's JetStream async publish, 1,024 in
// flight, Nats-Msg-Id set, and waits for every ack.
func natsReference(topic string, n int) (time.Duration, error) {
	nc, err := nats.Connect(brokertest.NATSURL())
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: topic, Subjects: []string{topic}}); err != nil {
		return 0, err
	}
	defer brokertest.DeleteStreams(brokertest.NATSURL(), topic)
	start := time.Now()
	futures := make([]jetstream.PubAckFuture, 0, n)
	for range n {
		m := nats.NewMsg(topic)
		m.Data = benchPayload
		m.Header.Set(jetstream.MsgIDHeader, uuid.NewString())
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return 0, err
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return 0, err
		case <-time.After(30 * time.Second):
			return 0, errors.New("nats reference: no ack within 30s")
		}
	}
	return time.Since(start), nil
}
