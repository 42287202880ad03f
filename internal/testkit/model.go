package testkit

import (
	"github.com/google/uuid"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
)

// Account is the tests' aggregate: an account whose deposits are the events.
// Its id is varchar(36) so the same model works on every database.
type Account struct {
	ID      uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	Balance int
	aggregate.Root
}

// Deposited is the event an Account records; Seq numbers an account's
// deposits so tests can check per-aggregate order.
type Deposited struct {
	AccountID uuid.UUID
	Seq       int
}

// EventType names the event (and, with the default topic, its topic).
func (Deposited) EventType() string { return "account.deposited" }

// OrderPlaced and PaymentTaken are the operating tools' test events: two
// types on two topics (OpsTopic), so figures per topic and filters by type
// have something to tell apart.
type OrderPlaced struct{ OrderID string }

// EventType names the event.
func (OrderPlaced) EventType() string { return "order.placed" }

// PaymentTaken is the second event type of the operating tools' tests.
type PaymentTaken struct{ OrderID string }

// EventType names the event.
func (PaymentTaken) EventType() string { return "payment.taken" }

// OpsTopic is the outbox hook's Topic for OrderPlaced and PaymentTaken:
// "payments" for payment.taken, "orders" for everything else.
func OpsTopic(env *events.Envelope) string {
	if env.Type == "payment.taken" {
		return "payments"
	}
	return "orders"
}
