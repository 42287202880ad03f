package testkit

import (
	"github.com/google/uuid"

	"github.com/heraldgo/herald/aggregate"
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
