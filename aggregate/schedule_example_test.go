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

type OrderPaid struct{ OrderID uuid.UUID }

func (OrderPaid) EventType() string { return "order.paid" }

// README:pay
func (o *Order) Pay() {
	o.Status = "paid"
	o.Record(OrderPaid{OrderID: o.ID})
	o.CancelKey("reminder:" + o.ID.String()) // in the transaction that saves the payment
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

// An aggregate cancels what it scheduled from its method, as it records
// events: the save that writes the payment cancels the reminder, in its
// transaction. After the commit, Rescheduled says what each cancel did.
func ExampleRoot_CancelKey() {
	o := &Order{ID: uuid.MustParse("0192f0c8-0000-7000-8000-000000000042")}
	o.Place()
	// db.Create(o): the order, order.placed and the reminder
	o.Pay()
	for _, c := range o.Reschedules() { // recorded, not yet saved
		fmt.Println(c.Key, c.Cancel)
	}
	// db.Save(o): the order, order.paid and the cancel commit together; then
	// o.Rescheduled()[0].Changed is 1, or Published, Due or Dead is, for a
	// reminder too late to cancel (the save does not fail for it).
	// Output:
	// reminder:0192f0c8-0000-7000-8000-000000000042 true
}
