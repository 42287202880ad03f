package amqp_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/publishers/amqp"
)

// url is the RabbitMQ the tests run against (HERALD_TEST_AMQP_URL overrides).
func url() string {
	if v := os.Getenv("HERALD_TEST_AMQP_URL"); v != "" {
		return v
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

var seq atomic.Int64

// name is an exchange or queue name unique to this test run.
func name(prefix string) string {
	return fmt.Sprintf("herald_amqp_%s_%d_%d_%d", prefix, os.Getpid(), time.Now().UnixNano(), seq.Add(1))
}

// admin is a channel of a connection of the test's own, for declaring and
// inspecting the topology; closed when the test ends.
func admin(t testing.TB) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(url())
	if err != nil {
		t.Fatalf("dial %s: %v", url(), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return ch
}

// topology declares exchange (durable, of kind) and queue bound to it with
// key, deleted when the test ends.
func topology(t testing.TB, exchange, kind, queue, key string, args amqp091.Table) {
	t.Helper()
	ch := admin(t)
	if err := ch.ExchangeDeclare(exchange, kind, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if queue != "" {
		if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { cleanup(exchange, queue) })
}

// cleanup deletes exchange and queue (either may be ""), ignoring errors.
func cleanup(exchange, queue string) {
	conn, err := amqp091.Dial(url())
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	if queue != "" {
		_, _ = ch.QueueDelete(queue, false, false, false)
	}
	if exchange != "" {
		_ = ch.ExchangeDelete(exchange, false, false)
	}
}

// depth is how many messages queue holds.
func depth(t testing.TB, queue string) int {
	t.Helper()
	q, err := admin(t).QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// newPublisher returns a Publisher on url() with cfg's other fields, closed
// when the test ends.
func newPublisher(t testing.TB, cfg amqp.Config) *amqp.Publisher {
	t.Helper()
	cfg.URL = url()
	if cfg.Logger == nil {
		cfg.Logger = testkit.Quiet()
	}
	p, err := amqp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// messages returns n messages, payload "i" and metadata {"i": "i"}.
func messages(n int) []*message.Message {
	out := make([]*message.Message, n)
	for i := range out {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
		m.Metadata.Set("i", fmt.Sprint(i))
		out[i] = m
	}
	return out
}
