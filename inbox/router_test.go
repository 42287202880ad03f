package inbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/relay"
)

// failingPublisher must never be called: the router must not publish what a
// handler behind the inbox returns.
type failingPublisher struct{ t *testing.T }

func (p failingPublisher) Publish(topic string, _ ...*message.Message) error {
	p.t.Errorf("the router published to %s: handler output must go to the outbox", topic)
	return nil
}
func (failingPublisher) Close() error { return nil }

func runRouter(t *testing.T, r *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	<-r.Running()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Handlers are deduplicated under their own names, and messages they return
// are written to the outbox in their transaction, then relayed, never published
// by the router.
func TestRouterHandlerNamesAndProducedMessages(t *testing.T) {
	e := newEnv(t)
	gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	in := e.inbox(inbox.Config{})
	router.AddMiddleware(in.Middleware)
	router.AddHandler("ship", "orders", gc, "shipments", failingPublisher{t}, func(msg *message.Message) ([]*message.Message, error) {
		tx := inbox.Tx(msg.Context())
		if err := tx.Create(&Effect{Consumer: "ship", MessageID: msg.UUID}).Error; err != nil {
			return nil, err
		}
		out := message.NewMessage(uuid.NewString(), []byte(`{"shipped":true}`))
		out.Metadata.Set(events.MetaType, "shipment.created")
		out.Metadata.Set("causation_id", msg.UUID)
		return []*message.Message{out}, nil
	})
	router.AddNoPublisherHandler("bill", "orders", gc, func(msg *message.Message) error {
		return inbox.Tx(msg.Context()).Create(&Effect{Consumer: "bill", MessageID: msg.UUID}).Error
	})
	runRouter(t, router)

	msg := message.NewMessage(uuid.NewString(), []byte(`{}`))
	for range 2 { // a duplicate
		if err := gc.Publish("orders", msg.Copy()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both handlers' effects", func() bool { return e.count("effects") == 2 })
	waitFor(t, "both inbox rows", func() bool { return e.count("inbox_messages") == 2 })
	time.Sleep(200 * time.Millisecond) // the duplicate is processed too
	if e.count("effects") != 2 {
		t.Fatalf("%d effects, want 2 (one per handler)", e.count("effects"))
	}
	var consumers []string
	e.db.Raw(`SELECT consumer FROM inbox_messages ORDER BY consumer`).Scan(&consumers)
	if len(consumers) != 2 || consumers[0] != "bill" || consumers[1] != "ship" {
		t.Fatalf("consumers %v", consumers)
	}
	var row struct{ Type, Topic, Metadata string }
	e.db.Raw(`SELECT type, topic, metadata::text AS metadata FROM outbox_messages`).Scan(&row)
	var md map[string]string
	_ = json.Unmarshal([]byte(row.Metadata), &md)
	if row.Type != "shipment.created" || row.Topic != "shipments" || md["causation_id"] != msg.UUID {
		t.Fatalf("outbox row %+v", row)
	}

	// The relay publishes it.
	out := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	r, err := relay.New(e.db, out, relay.Config{PollInterval: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	ch, err := out.Subscribe(ctx, "shipments")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		m.Ack()
		if m.Metadata.Get(events.MetaType) != "shipment.created" {
			t.Fatalf("relayed %v", m.Metadata)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's message was not relayed")
	}
}
