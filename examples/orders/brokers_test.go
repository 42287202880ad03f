package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldgo/herald/internal/pgtest"
)

// The example runs end to end on each broker, through Herald's publisher for
// it and the consumer set-up of brokers.go (natsSubscriber, amqpSubscriber,
// kafkaSubscriber): every event published, shipped once, the lost ack
// redelivered and skipped by the inbox, every topic read by the audit
// consumer. NATS and RabbitMQ are the servers of this machine
// (HERALD_TEST_NATS_URL, HERALD_TEST_AMQP_URL override); Kafka is franz-go's
// in-process fake cluster, kfake.
func TestExampleRunsOnBrokers(t *testing.T) {
	if v := os.Getenv("HERALD_TEST_NATS_URL"); v != "" {
		t.Setenv("NATS_URL", v)
	}
	if v := os.Getenv("HERALD_TEST_AMQP_URL"); v != "" {
		t.Setenv("AMQP_URL", v)
	}
	topics := func(prefix string) []string {
		var out []string
		for _, e := range eventTypes {
			out = append(out, topicOf(prefix, e))
		}
		return out
	}
	t.Run("nats", func(t *testing.T) {
		name := pgtest.Name("herald_example_")
		t.Cleanup(func() {
			_ = deleteNATSStreams(context.Background(), envOr("NATS_URL", "nats://127.0.0.1:4222"), topics(name))
		})
		if err := run(context.Background(), 4, "nats", "table", "", name); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("rabbitmq", func(t *testing.T) {
		name := pgtest.Name("herald_example_")
		t.Cleanup(func() {
			_ = deleteRabbitMQ(envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), topics(name), []string{"shipping", "audit"})
		})
		if err := run(context.Background(), 4, "rabbitmq", "table", "", name); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("kafka", func(t *testing.T) {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cluster.Close)
		t.Setenv("KAFKA_BROKERS", strings.Join(cluster.ListenAddrs(), ","))
		if err := run(context.Background(), 4, "kafka", "table", "", pgtest.Name("herald_example_")); err != nil {
			t.Fatal(err)
		}
	})
}
