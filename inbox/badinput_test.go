package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
)

type Paid struct{ Amount int }

func (Paid) EventType() string { return "paid" }

// A consumer's bad input: a payload that does not decode and an unknown type are
// permanent failures (events.ErrDecode, events.ErrUnknownType). Behind the inbox
// they roll back like any handler error; Watermill's PoisonQueue, filtered on
// them, diverts the message instead of nacking it forever. The good message is
// handled once.
func TestConsumerBadInputToPoisonQueue(t *testing.T) {
	e := newEnv(t)
	gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	var reg events.Registry
	reg.MustRegister(Paid{})
	poison, err := middleware.PoisonQueueWithFilter(gc, "poison", func(err error) bool {
		return errors.Is(err, events.ErrDecode) || errors.Is(err, events.ErrUnknownType)
	})
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(poison, e.inbox(inbox.Config{}).Middleware)
	router.AddNoPublisherHandler("pay", "payments", gc, func(msg *message.Message) error {
		ev, _, err := reg.DecodeMessage(msg)
		if err != nil {
			return err
		}
		return inbox.Tx(msg.Context()).Create(&Effect{Consumer: "pay", MessageID: msg.UUID + ":" + string(rune('0'+ev.(Paid).Amount))}).Error
	})
	runRouter(t, router)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	poisoned, err := gc.Subscribe(ctx, "poison")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(typ, payload string) *message.Message {
		return events.NewMessage(events.Envelope{ID: events.NewID(), Type: typ, Version: 1, OccurredAt: time.Now(), Payload: []byte(payload)})
	}
	bad := []*message.Message{mk("paid", `{"Amount":"not a number"}`), mk("refunded", `{}`)}
	for _, m := range append(bad, mk("paid", `{"Amount":5}`)) {
		if err := gc.Publish("payments", m); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for range bad {
		select {
		case m := <-poisoned:
			m.Ack()
			got[m.UUID] = m.Metadata.Get(middleware.ReasonForPoisonedKey)
		case <-time.After(10 * time.Second):
			t.Fatal("bad message not diverted to the poison queue")
		}
	}
	for _, m := range bad {
		if got[m.UUID] == "" {
			t.Fatalf("message %s not poisoned (%v)", m.UUID, got)
		}
	}
	waitFor(t, "the good message's effect", func() bool { return e.count("effects") == 1 })
	if n := e.count("inbox_messages"); n != 1 {
		t.Fatalf("%d inbox rows, want 1: a poisoned message must leave none", n)
	}
	_ = uuid.Nil
}
