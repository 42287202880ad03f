package e2e

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// relay.New warns about a Watermill publisher that can return before the
// broker stored the message: watermill-amqp without ConfirmDelivery (its
// presets), watermill-nats on core NATS; not about the safe settings.
func TestUnsafePublisherWarned(t *testing.T) {
	t.Parallel()
	db := testkit.SQLite.OpenNew(t, nil)
	warned := func(pub message.Publisher) string {
		t.Helper()
		var buf bytes.Buffer
		_, err := relay.New(db, pub, relay.Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		testkit.Must(t, err)
		return buf.String()
	}
	amqpPub := func(confirm bool) message.Publisher {
		t.Helper()
		cfg := amqp.NewDurablePubSubConfig(brokertest.AMQPURL(), amqp.GenerateQueueNameTopicNameWithSuffix("herald_unsafe"))
		cfg.Publish.ConfirmDelivery = confirm
		pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
		testkit.Must(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		return pub
	}
	natsPub := func(core bool) message.Publisher {
		t.Helper()
		cfg := brokertest.NATSPublisherConfig(brokertest.NATSURL())
		cfg.JetStream.Disabled = core
		pub, err := wmnats.NewPublisher(cfg, watermill.NopLogger{})
		testkit.Must(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		return pub
	}
	for _, c := range []struct {
		name string
		pub  message.Publisher
		want string // in the warning; "" for none
	}{
		{"amqp durable preset", amqpPub(false), "ConfirmDelivery"},
		{"amqp with confirms", amqpPub(true), ""},
		{"core nats", natsPub(true), "core NATS"},
		{"nats jetstream", natsPub(false), ""},
		{"gochannel", testkit.NewGoChannel(), ""},
	} {
		got := warned(c.pub)
		switch {
		case c.want == "" && strings.Contains(got, "may lose events"):
			t.Errorf("%s: warned: %s", c.name, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s: no warning naming %q: %q", c.name, c.want, got)
		}
	}
}
