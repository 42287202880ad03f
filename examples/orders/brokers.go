package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/publishers/amqp"
	"github.com/heraldgo/herald/publishers/kafka"
	"github.com/heraldgo/herald/publishers/natsjs"
)

// quiet is the publishers' logger here: warnings and errors only, not their
// connection news.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// broker is one broker as the example uses it: the relay publishes through
// pub, Herald's publisher for that broker (safe for an outbox: Publish
// returns only once the broker stored the message), and each consumer reads
// through a subscriber of its own, sub(consumer), set up to match pub.
type broker struct {
	pub   message.Publisher
	sub   func(consumer string) (message.Subscriber, error)
	close func()
}

// openBroker connects to the broker kind names. Before anything is published
// it removes what an earlier run may have left on the example's own topics
// (a NATS stream, a RabbitMQ exchange and queues named after them), saying so:
// a durable consumer would otherwise be handed the previous run's messages.
func openBroker(ctx context.Context, kind string, topics []string) (*broker, error) {
	logger := watermill.NopLogger{}
	switch kind {
	case "gochannel":
		gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, logger)
		return &broker{pub: gc, sub: func(string) (message.Subscriber, error) { return gc, nil }, close: func() { _ = gc.Close() }}, nil
	case "nats":
		url := envOr("NATS_URL", "nats://127.0.0.1:4222")
		fmt.Printf("NATS at %s: deleting the streams %s (this example's own, left by an earlier run)\n", url, strings.Join(topics, ", "))
		if err := deleteNATSStreams(ctx, url, topics); err != nil {
			return nil, fmt.Errorf("cannot reach NATS at %s: %w", url, err)
		}
		pub, err := natsPublisher(url)
		if err != nil {
			return nil, fmt.Errorf("cannot reach NATS at %s: %w", url, err)
		}
		return &broker{pub: pub, sub: func(consumer string) (message.Subscriber, error) { return natsSubscriber(url, consumer) },
			close: func() { _ = pub.Close() }}, nil
	case "rabbitmq":
		url := envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
		fmt.Printf("RabbitMQ: deleting the exchanges %s and their queues (this example's own, left by an earlier run)\n", strings.Join(topics, ", "))
		if err := deleteRabbitMQ(url, topics, []string{"shipping", "audit"}); err != nil {
			return nil, fmt.Errorf("cannot reach RabbitMQ: %w", err)
		}
		pub, err := amqpPublisher(url)
		if err != nil {
			return nil, fmt.Errorf("cannot reach RabbitMQ: %w", err)
		}
		return &broker{pub: pub, sub: func(consumer string) (message.Subscriber, error) { return amqpSubscriber(url, consumer) },
			close: func() { _ = pub.Close() }}, nil
	case "kafka":
		brokers := strings.Split(envOr("KAFKA_BROKERS", "127.0.0.1:9092"), ",")
		if err := createKafkaTopics(ctx, brokers, topics); err != nil {
			return nil, fmt.Errorf("cannot reach Kafka at %s: %w", strings.Join(brokers, ","), err)
		}
		pub, err := kafkaPublisher(brokers)
		if err != nil {
			return nil, fmt.Errorf("cannot reach Kafka at %s: %w", strings.Join(brokers, ","), err)
		}
		return &broker{pub: pub, sub: func(consumer string) (message.Subscriber, error) { return kafkaSubscriber(brokers, consumer) },
			close: func() { _ = pub.Close() }}, nil
	}
	return nil, fmt.Errorf("unknown -broker %q: gochannel, nats, rabbitmq or kafka", kind)
}

// NATS JetStream.

// natsPublisher is the relay's publisher: Herald's natsjs, which waits for
// JetStream's ack of every message (pipelined), sends the event id as
// Nats-Msg-Id (a copy published again within the stream's duplicate window,
// two minutes by default, is dropped), and with AutoProvision makes a
// topic's stream on its first publish: named after the topic, with the topic
// as its subject (natsjs.DefaultStreamConfig), as watermill-nats does.
func natsPublisher(url string) (*natsjs.Publisher, error) {
	return natsjs.New(natsjs.Config{URL: url, AutoProvision: true, Logger: quiet})
}

// natsSubscriber is a consumer's subscriber for what natsPublisher
// publishes: natsjs.NewSubscriber, watermill-nats' JetStream subscriber set
// up for an outbox's consumer. consumer names its durable JetStream
// consumer on each topic's stream and its queue group: the instances of one
// consumer share its messages, and JetStream keeps its position and its
// unacknowledged messages across restarts. Each message is acked (AckSync)
// only once the handler acked it, after the inbox's transaction committed; a
// message whose process stopped first is delivered again after AckWait
// (30s by default: longer than a handler takes). AutoProvision makes the
// topic's stream, named as natsPublisher names it, when the consumer starts
// before the first publish. The settings and why each is needed:
// go doc github.com/heraldgo/herald/publishers/natsjs SubscriberConfig.Watermill.
func natsSubscriber(url, consumer string) (*natsjs.Subscriber, error) {
	return natsjs.NewSubscriber(natsjs.SubscriberConfig{URL: url, Consumer: consumer, AutoProvision: true, Logger: quiet})
}

// deleteNATSStreams deletes the streams named (a missing one is no error).
func deleteNATSStreams(ctx context.Context, url string, streams []string) error {
	nc, err := natsgo.Connect(url, natsgo.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, s := range streams {
		if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s: %w", s, err)
		}
	}
	return nil
}

// RabbitMQ.

// amqpPublisher is the relay's publisher: Herald's amqp, which publishes each
// message persistent and mandatory and counts it published only once
// RabbitMQ confirmed it and did not return it. Its defaults are
// watermill-amqp's durable pub/sub topology: a durable fanout exchange named
// after the topic, declared on first use, an empty routing key. A message no
// queue is bound for is returned and fails as an outage (retried until a queue
// is bound; it never dies of it): start the consumers, whose subscribers
// declare and bind their queues, before the relay publishes.
func amqpPublisher(url string) (*amqp.Publisher, error) {
	return amqp.New(amqp.Config{URL: url, Logger: quiet})
}

// amqpSubscriber is a consumer's subscriber for what amqpPublisher
// publishes: watermill-amqp's durable pub/sub config. On Subscribe it
// declares the topic's exchange exactly as the publisher does (durable,
// fanout: other arguments would fail the declaration) and a durable queue
// named <topic>_<consumer> bound to it, so each consumer has a queue of its
// own on every topic and the instances of one consumer share it. It reads
// the message UUID (the event id) from the "_watermill_message_uuid" header
// and the metadata from the other headers, as the publisher writes them;
// it acks once the handler returned nil and nacks (requeues) otherwise, and
// takes one unacked message at a time (Qos.PrefetchCount 1).
func amqpSubscriber(url, consumer string) (*wmamqp.Subscriber, error) {
	cfg := wmamqp.NewDurablePubSubConfig(url, wmamqp.GenerateQueueNameTopicNameWithSuffix(consumer))
	return wmamqp.NewSubscriber(cfg, watermill.NopLogger{})
}

// deleteRabbitMQ deletes the exchanges named and the queues of consumers on
// them (<exchange>_<consumer>).
func deleteRabbitMQ(url string, exchanges, consumers []string) error {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	for _, x := range exchanges {
		for _, c := range consumers {
			if _, err := ch.QueueDelete(x+"_"+c, false, false, false); err != nil {
				return err
			}
		}
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return err
		}
	}
	return nil
}

// Kafka.

// kafkaPublisher is the relay's publisher: Herald's kafka, franz-go's
// idempotent producer with acks=all, the aggregate id as the record key
// (an aggregate's events in one partition, in order), the UUID and metadata
// as headers as watermill-kafka writes them. The topics must exist: a
// missing one is an outage, retried.
func kafkaPublisher(brokers []string) (*kafka.Publisher, error) {
	return kafka.New(kafka.Config{Brokers: brokers, Logger: quiet})
}

// kafkaSubscriber is a consumer's subscriber for what kafkaPublisher
// publishes: watermill-kafka's subscriber in a consumer group named after
// the consumer (its instances share the partitions), with DefaultMarshaler,
// which reads the UUID (the event id) from the "_watermill_message_uuid"
// header and the metadata from the others. An acked message's offset is
// marked, and committed by Sarama's auto-commit; a nacked one is handed to
// the handler again (after NackResendSleep) before the partition goes on.
func kafkaSubscriber(brokers []string, consumer string) (*wmkafka.Subscriber, error) {
	scfg := wmkafka.DefaultSaramaSubscriberConfig()
	// A new group reads each partition from its start: events published
	// before the consumer first ran are not skipped (Sarama's default is
	// the newest offset).
	scfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	return wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers:               brokers,
		Unmarshaler:           wmkafka.DefaultMarshaler{},
		OverwriteSaramaConfig: scfg,
		ConsumerGroup:         consumer,
	}, watermill.NopLogger{})
}

// createKafkaTopics creates the topics that are missing (3 partitions, the
// cluster's default replication).
func createKafkaTopics(ctx context.Context, brokers, topics []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := kadm.NewClient(cl).CreateTopics(ctx, 3, -1, nil, topics...)
	if err != nil {
		return err
	}
	for _, r := range res.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
