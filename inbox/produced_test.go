package inbox_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
)

// A handler that copies the incoming message's metadata onto what it produces
// (to pass a correlation id on) copies the incoming event id too: every produced
// message is still written, under an id of its own.
func TestProducedMessagesWithCopiedMetadata(t *testing.T) {
	e := newEnv(t)
	in := e.inbox(inbox.Config{Consumer: "fan-out"})
	h := in.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		var out []*message.Message
		for range 3 {
			m := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
			for k, v := range msg.Metadata {
				m.Metadata.Set(k, v)
			}
			out = append(out, m)
		}
		return out, nil
	})
	msg := events.NewMessage(events.Envelope{ID: events.NewID(), Type: "order.paid", Version: 1, Payload: []byte(`{}`),
		Metadata: events.Metadata{"correlation_id": "c-7"}})
	msg.SetContext(context.Background())
	if _, err := h(msg); err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		ID, Topic, Metadata string
	}
	if err := e.db.Raw(`SELECT id::text, topic, metadata::text FROM outbox_messages`).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d produced messages written, want 3: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if r.ID == msg.UUID {
			t.Fatalf("row %+v", r)
		}
	}
}
