package events_test

import (
	"fmt"
	"log"
	"time"

	"github.com/heraldgo/herald/events"
)

// A consumer registers the event types it handles and decodes messages back into
// them.
func ExampleRegistry() {
	var reg events.Registry
	reg.MustRegister(OrderPaid{})

	// What the relay publishes for a stored event:
	msg := events.NewMessage(events.Envelope{
		ID:         events.NewID(),
		Type:       "order.paid",
		Version:    1,
		OccurredAt: time.Now(),
		Payload:    []byte(`{"OrderID":"o-1","Amount":1500}`),
		Metadata:   events.Metadata{"correlation_id": "req-42"},
	})

	e, env, err := reg.DecodeMessage(msg)
	if err != nil {
		log.Fatal(err)
	}
	paid := e.(OrderPaid)
	fmt.Println(env.Type, paid.OrderID, paid.Amount, env.Metadata["correlation_id"], msg.UUID == env.ID.String())
	// Output: order.paid o-1 1500 req-42 true
}
