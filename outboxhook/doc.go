// Package outboxhook is the GORM plugin that writes the events aggregates
// record to the outbox table, in the same transaction as the aggregates' own
// rows: both commit, or neither does.
//
//	db.Use(outboxhook.New(outboxhook.Config{}))
//	order.Pay(1500)               // records OrderPaid on the aggregate
//	err := db.Save(&order).Error  // UPDATE orders + INSERT INTO outbox_messages, one transaction
//
// Callbacks on GORM's create, update and delete chains find the aggregates
// (models embedding aggregate.Root) in the statement, check and encode their
// pending events before anything is written, and insert them, in one INSERT,
// after the row was written and before GORM commits. Under
// SkipDefaultTransaction the plugin opens a transaction itself for a statement
// that may write events.
//
// Events are written for the rows a statement wrote, as the database counts
// them: a Save's UPDATE that found no row leaves them to its INSERT, and an
// upsert that left an existing row alone (clause.OnConflict{DoNothing: true})
// keeps them pending. MySQL counts such a row as affected (clientFoundRows),
// so there that upsert fails with [ErrAmbiguousUpsert] before anything is
// written; UpdateAll and DoUpdates write the row, and its events, everywhere.
//
// The plugin wraps the *gorm.DB's connection pool, so it sees every
// transaction begun through it end (GORM's own, db.Transaction, db.Begin,
// CreateInBatches) and its savepoints roll back: an aggregate forgets its
// events exactly when the transaction that wrote them commits, and keeps them,
// to be written again under the same ids, when it rolls back. A write whose
// events cannot be written fails, and leaves its transaction unable to commit.
//
// [Add] and [AddMessages] write events that belong to no aggregate, and the
// messages an inbox handler returns, in the caller's transaction.
package outboxhook
