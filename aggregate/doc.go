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
// Methods also schedule events for later (Schedule) and cancel or move
// scheduled ones (CancelKey, Cancel, MoveKey, Move): a cancel is recorded
// like an event, applied by the outbox hook in the transaction of the save
// that writes the aggregate, in the order recorded, and kept pending like an
// event if that transaction rolls back. Rescheduled tells, after the commit,
// what each did.
//
// The aggregate type defaults to the GORM model's name ("Order") and the aggregate
// id to its primary key; a model can say otherwise by implementing [Typed] or
// [Identified].
package aggregate
