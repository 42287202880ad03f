package events_test

import (
	"fmt"
	"log"
	"time"

	"github.com/heraldgo/herald/events"
)

// A consumer registers the event types it handles and decodes them back from
// what a message carries (inbox.Decode does this for a Watermill message).
func ExampleRegistry() {
	var reg events.Registry
	reg.MustRegister(OrderPaid{})

	// What the relay publishes for a stored event: the event id as the message
	// UUID, the envelope's message metadata, the payload.
	stored := events.Envelope{
		ID:         events.NewID(),
		Type:       "order.paid",
		Version:    1,
		OccurredAt: time.Now(),
		Payload:    []byte(`{"OrderID":"o-1","Amount":1500}`),
		Metadata:   events.Metadata{"correlation_id": "req-42"},
	}
	msgUUID, md, payload := stored.ID.String(), stored.MessageMetadata(), stored.Payload

	env, err := events.ParseEnvelope(msgUUID, md, payload)
	if err != nil {
		log.Fatal(err)
	}
	e, err := reg.Decode(env)
	if err != nil {
		log.Fatal(err)
	}
	paid := e.(OrderPaid)
	fmt.Println(env.Type, paid.OrderID, paid.Amount, env.Metadata["correlation_id"], env.ID == stored.ID)
	// Output: order.paid o-1 1500 req-42 true
}
