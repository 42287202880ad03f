package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/internal/tcpproxy"
	"github.com/heraldgo/herald/publishers/amqp"
)

// amqpBroker is the shared RabbitMQ behind a TCP proxy of the run's own: an
// outage cuts every connection through the proxy and refuses new ones (the
// server itself is never stopped: it is shared). The run's exchanges and
// queues have names of their own, deleted at the end. Each topic is a
// durable fanout exchange (what watermill-amqp's durable pub/sub config and
// Herald's publisher declare) with three queues: the consumers', the
// observer's, and an archive nobody reads until the run ends, whose order is
// the order RabbitMQ stored the messages in.
type amqpBroker struct {
	upstream string // the server's URL
	proxy    *tcpproxy.Proxy
	topics   []string
}

// amqpQueue is the queue of topic for the consumer group (consumers,
// observer, archive).
func amqpQueue(topic, group string) string { return topic + "_" + group }

func startAMQP(topics []string) (*amqpBroker, error) {
	b := &amqpBroker{upstream: brokertest.AMQPURL(), topics: topics}
	conn, err := amqp091.Dial(b.upstream)
	if err != nil {
		return nil, fmt.Errorf("chaos: RabbitMQ at %s: %w", b.upstream, err)
	}
	defer conn.Close() //nolint:errcheck // set-up only
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	for _, t := range topics {
		if err := ch.ExchangeDeclare(t, "fanout", true, false, false, false, nil); err != nil {
			return nil, err
		}
		// All three queues before any relay publishes: a fanout exchange
		// drops what it has no bound queue for (the consumers' subscribers
		// would declare theirs only when they start).
		for _, g := range []string{"consumers", "observer", "archive"} {
			q := amqpQueue(t, g)
			if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
				return nil, err
			}
			if err := ch.QueueBind(q, "", t, false, nil); err != nil {
				return nil, err
			}
		}
	}
	u, err := url.Parse(b.upstream)
	if err != nil {
		return nil, err
	}
	if b.proxy, err = tcpproxy.Start(u.Host); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *amqpBroker) URL() string {
	u, _ := url.Parse(b.upstream)
	u.Host = b.proxy.Addr
	return u.String()
}

func (b *amqpBroker) Stop()        { b.proxy.Down() }
func (b *amqpBroker) Start() error { b.proxy.Up(); return nil }

// Close stops the proxy and deletes the run's exchanges and queues.
func (b *amqpBroker) Close() {
	b.proxy.Close()
	conn, err := amqp091.Dial(b.upstream)
	if err != nil {
		return
	}
	defer conn.Close() //nolint:errcheck // clean-up only
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, t := range b.topics {
		for _, g := range []string{"consumers", "observer", "archive"} {
			_, _ = ch.QueueDelete(amqpQueue(t, g), false, false, false)
		}
		_ = ch.ExchangeDelete(t, false, false)
	}
}

// inspect runs fn on a channel to the server itself (not through the proxy).
func (b *amqpBroker) inspect(fn func(*amqp091.Channel) error) error {
	conn, err := amqp091.Dial(b.upstream)
	if err != nil {
		return err
	}
	defer conn.Close() //nolint:errcheck // read-only
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return fn(ch)
}

func (b *amqpBroker) Stored(topics []string) int64 {
	var n int64
	_ = b.inspect(func(ch *amqp091.Channel) error {
		for _, t := range topics {
			q, err := ch.QueueDeclarePassive(amqpQueue(t, "archive"), true, false, false, false, nil)
			if err != nil {
				return err
			}
			n += int64(q.Messages)
		}
		return nil
	})
	return n
}

func (b *amqpBroker) ReadBack(ctx context.Context, topics []string) (stored, error) {
	var s stored
	err := b.inspect(func(ch *amqp091.Channel) error {
		if err := ch.Qos(1000, 0, false); err != nil {
			return err
		}
		for _, t := range topics {
			name := amqpQueue(t, "archive")
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			if err != nil {
				return err
			}
			deliveries, err := ch.ConsumeWithContext(ctx, name, "chaos-readback", false, true, false, false, nil)
			if err != nil {
				return err
			}
			seen := map[string]bool{}
			timeout := time.After(2 * time.Minute)
			for read := 0; read < q.Messages; read++ {
				var d amqp091.Delivery
				select {
				case d = <-deliveries:
				case <-timeout:
					return fmt.Errorf("read %d of %d messages of %s", read, q.Messages, name)
				}
				id, _ := d.Headers[amqp.DefaultUUIDHeader].(string)
				if seen[id] {
					s.dups++
				} else {
					seen[id] = true
					s.order = append(s.order, decodeObserved(id, d.Body))
				}
				if read%500 == 499 || read == q.Messages-1 {
					_ = d.Ack(true) // what was read is not redelivered to this consumer anyway
				}
			}
			if err := ch.Cancel("chaos-readback", false); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("read back: %w", err)
	}
	return s, nil
}

// Debug prints each queue's ready messages and consumers.
func (b *amqpBroker) Debug(topics []string) {
	_ = b.inspect(func(ch *amqp091.Channel) error {
		for _, t := range topics {
			for _, g := range []string{"consumers", "observer", "archive"} {
				if q, err := ch.QueueDeclarePassive(amqpQueue(t, g), true, false, false, false, nil); err == nil {
					fmt.Fprintf(os.Stderr, "chaos: queue %s: %d ready, %d consumers\n", q.Name, q.Messages, q.Consumers)
				}
			}
		}
		return nil
	})
}

// newAMQPSubscriber is a watermill-amqp subscriber to the queues of group,
// through the proxy at url, with up to n unacked messages per consumer.
func newAMQPSubscriber(url, group string, n int) (message.Subscriber, error) {
	cfg := wmamqp.NewDurablePubSubConfig(url, func(topic string) string { return amqpQueue(topic, group) })
	cfg.Consume.Qos.PrefetchCount = n
	if n == 1 {
		cfg.Consume.Qos.PrefetchCount = 256 // the observer: one consumer, in queue order, not waiting on each ack
	}
	cfg.Connection.Reconnect = &wmamqp.ReconnectConfig{BackoffInitialInterval: 100 * time.Millisecond,
		BackoffRandomizationFactor: 0.5, BackoffMultiplier: 1.5, BackoffMaxInterval: time.Second}
	return wmamqp.NewSubscriber(cfg, wmLogger())
}

// newAMQPPublisher is Herald's RabbitMQ publisher, through the proxy at url.
func newAMQPPublisher(url string) (*amqp.Publisher, error) {
	return amqp.New(amqp.Config{URL: url, DialTimeout: time.Second, Logger: quiet()})
}
