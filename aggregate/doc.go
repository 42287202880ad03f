// Package aggregate gives domain objects a place to record the events their
// methods raise.
//
// Embed [Root] in a GORM model and call Record from its methods:
//
//	type Order struct {
//		ID     uuid.UUID `gorm:"type:uuid;primaryKey"`
//		Status string
//		aggregate.Root
//	}
//
//	func (o *Order) Pay(amount int) {
//		o.Status = "paid"
//		o.Record(OrderPaid{OrderID: o.ID, Amount: amount})
//	}
//
// Recording only keeps the event in memory, with its id (a UUIDv7) and time. The
// outbox hook (package outboxhook) writes the pending events of every aggregate a
// GORM statement saves, in that statement's transaction, and the Root forgets
// them once that transaction is known to have committed. If it rolls back they
// stay pending, and the next save writes them, once.
//
// The aggregate type defaults to the GORM model's name ("Order") and the aggregate
// id to its primary key; a model can say otherwise by implementing [Typed] or
// [Identified].
package aggregate
