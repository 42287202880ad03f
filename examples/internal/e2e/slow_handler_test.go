package e2e

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
)

// A handler that outlasts the subscriber's ack wait (waiting for a lock the
// application holds, say) and then fails gets its message again, and its
// effect happens once: the JetStream subscriptions ack by hand. With
// nats.go's default auto-ack the message was acked when watermill-nats gave
// up waiting for the handler, and never redelivered (found by the chaos run's
// long transaction on SQLite: 2-7 events in the streams never applied).
func TestSlowFailingHandlerIsRedelivered(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	topic := brokertest.Topic("slow")
	pub, err := wmnats.NewPublisher(brokertest.NATSPublisherConfig(brokertest.NATSURL()), watermill.NopLogger{})
	testkit.Must(t, err)
	scfg := brokertest.NATSSubscriberConfig(brokertest.NATSURL(), "herald_slow")
	scfg.AckWaitTimeout = ackWait
	scfg.JetStream.SubscribeOptions = append(scfg.JetStream.SubscribeOptions, nats.AckWait(ackWait))
	sub, err := wmnats.NewSubscriber(scfg, watermill.NopLogger{})
	testkit.Must(t, err)
	t.Cleanup(func() {
		_ = sub.Close()
		_ = pub.Close()
		brokertest.DeleteStreams(brokertest.NATSURL(), topic)
	})

	db := testkit.SQLite.OpenNew(t, nil)
	testkit.Must(t, db.AutoMigrate(&Effect{}))
	in, err := inbox.New(db, inbox.Config{})
	testkit.Must(t, err)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	testkit.Must(t, err)
	router.AddMiddleware(in.Middleware)
	var (
		mu    sync.Mutex
		calls = map[string]int{}
	)
	router.AddConsumerHandler("slow", topic, sub, func(msg *message.Message) error {
		mu.Lock()
		calls[msg.UUID]++
		first := calls[msg.UUID] == 1
		mu.Unlock()
		if first { // outlast the ack wait, then fail
			<-msg.Context().Done()
			time.Sleep(200 * time.Millisecond)
			return errors.New("gave up waiting")
		}
		return inbox.Tx(msg.Context()).Create(&Effect{Consumer: "slow", MessageID: msg.UUID}).Error
	})
	runRouter(t, router)

	want := map[string]bool{}
	for range 3 {
		msg := message.NewMessage(uuid.NewString(), []byte(`{}`))
		want[msg.UUID] = true
		testkit.Must(t, pub.Publish(topic, msg))
	}
	eventually(t, 30*time.Second, "every slow message's effect", func() bool {
		e := effectsOf(t, db)
		for id := range want {
			if e[id] == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * ackWait) // late redeliveries
	for id, n := range effectsOf(t, db) {
		if !want[id] || n != 1 {
			t.Fatalf("message %s: %d effects, want exactly 1 of each published", id, n)
		}
	}
}
