package aggregate_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
)

type Order struct {
	ID     uuid.UUID `gorm:"type:uuid;primaryKey"`
	Status string
	aggregate.Root
}

type OrderPlaced struct{ OrderID uuid.UUID }

func (OrderPlaced) EventType() string { return "order.placed" }

type PaymentReminder struct{ OrderID uuid.UUID }

func (PaymentReminder) EventType() string { return "order.payment_reminder" }

// README:schedule
func (o *Order) Place() {
	o.Status = "placed"
	o.Record(OrderPlaced{OrderID: o.ID})
	o.Schedule(PaymentReminder{OrderID: o.ID},
		events.After(24*time.Hour).Keyed("reminder:"+o.ID.String()))
}

// README:end

// An aggregate schedules an event from its method: saved with the order, and
// published 24 hours later unless cancelled by its key before then.
func ExampleRoot_Schedule() {
	o := &Order{ID: uuid.MustParse("0192f0c8-0000-7000-8000-000000000042")}
	o.Place()
	for _, r := range o.Records() {
		fmt.Println(r.Event.EventType(), r.Schedule.After, r.Schedule.IsZero())
	}
	// Output:
	// order.placed 0s true
	// order.payment_reminder 24h0m0s false
}
