package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/relay"
)

// errNoBrokerReference: the publisher has no broker reference (GoChannel,
// discard); the scenario is left out.
var errNoBrokerReference = errors.New("no broker reference for this publisher")

// brokerReference publishes n messages like the outbox's straight to the
// broker of publisher kind with its fastest plain client, pipelined with an
// ack per message, no database: the most the broker takes from one client
// here. The messages are the relay's (benchMessage: the same payload, the
// event's metadata as headers, as Herald's publishers send them; headers
// cost the broker: ten of 36 bytes nearly doubled RabbitMQ's CPU per
// message). It returns how long it took.
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

// benchMessage is the message the relay makes of the i-th event of the
// outbox's backlog (loadOutbox): its payload, UUID and metadata.
func benchMessage(i int) *message.Message {
	return relay.NewMessage(events.Envelope{ID: uuid.Must(uuid.NewV7()), Type: "bench.event", Version: 1,
		AggregateType: "Bench", AggregateID: fmt.Sprintf("agg-%d", i%1000), OccurredAt: time.Now().UTC(), Payload: benchPayload})
}

// uuidHeader is the header Herald's publishers (and Watermill's) carry the
// message UUID in.
const uuidHeader = "_watermill_message_uuid"

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

// amqpReference publishes persistent messages, mandatory (an unroutable one
// is returned: what an outbox must know), on one confirm-mode channel, 1,024
// unconfirmed at most, and waits for every confirm.
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
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
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
	for i := range n {
		m := benchMessage(i)
		headers := make(amqp091.Table, len(m.Metadata)+1)
		for k, v := range m.Metadata {
			headers[k] = v
		}
		headers[uuidHeader] = m.UUID
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, topic, "", true, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Headers: headers, Body: m.Payload})
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
	select {
	case r := <-returns:
		return 0, fmt.Errorf("amqp reference: a message was returned: %s", r.ReplyText)
	default:
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
		m := benchMessage(i)
		headers := make([]kgo.RecordHeader, 0, len(m.Metadata)+1)
		headers = append(headers, kgo.RecordHeader{Key: uuidHeader, Value: []byte(m.UUID)})
		for k, v := range m.Metadata {
			headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(m.Metadata[events.MetaAggregateID]), Value: m.Payload,
			Headers: headers},
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
// flight, the metadata as headers and Nats-Msg-Id set, and waits for every
// ack.
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
	for i := range n {
		bm := benchMessage(i)
		m := nats.NewMsg(topic)
		m.Data = bm.Payload
		m.Header.Set(uuidHeader, bm.UUID)
		for k, v := range bm.Metadata {
			m.Header.Set(k, v)
		}
		m.Header.Set(jetstream.MsgIDHeader, bm.UUID)
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
