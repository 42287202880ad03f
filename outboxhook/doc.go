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
// db.Connection's connection is wrapped at the first statement run on the
// *gorm.DB its function is handed; a transaction begun on it before that is
// not seen, and is settled at the next save of its aggregates (PostgreSQL
// asks the server; SQLite and MySQL never write again an event whose row is
// not found, since it may have been published or cancelled: see
// docs/limits.md).
//
// Savepoints are followed in GORM's spelling (tx.SavePoint, tx.RollbackTo, a
// nested db.Transaction) and raw SQL's, with or without PrepareStmt. A
// statement that may have undone outbox rows and is not read exactly (a
// ROLLBACK in another spelling, a CALL, a failed statement, anything run on
// the *sql.Tx that [SQLTx] hands out) costs one query at commit, in the
// transaction, that looks its events up: those no longer there stay pending.
// No spelling loses an event. (With StorageWAL there is nothing to look up:
// such a transaction's events stay pending and are emitted again by the next
// save of their aggregates, at worst twice.)
//
// [Add] and [AddMessages] write events that belong to no aggregate, and the
// messages an inbox handler returns, in the caller's transaction.
//
// Scheduled events (aggregate.Root.Schedule, [Schedule]) are cancelled or
// moved by the aggregate's methods (aggregate.Root.CancelKey, Cancel,
// MoveKey, Move), which the plugin applies in the save's transaction, in the
// order recorded relative to the events, and settles as it settles events;
// or by [CancelKey], [Cancel], [MoveKey] and [Move] in the caller's
// transaction. [RequireRescheduled] makes a save fail when such a change
// changes nothing.
//
// Because the transaction is wrapped, tx.Statement.ConnPool.(*sql.Tx) is
// false inside db.Transaction: [SQLTx] returns the *sql.Tx under the wrapper,
// for libraries that share the GORM transaction as a *sql.Tx (River's
// riverdatabasesql, DTM's barriers).
//
// # Metadata
//
// Config.EventMetadata adds metadata computed from each event. For consumers
// written for Watermill's CQRS component with its default
// cqrs.JSONMarshaler, which routes by the "name" metadata key:
//
//	EventMetadata: func(e events.Event) events.Metadata {
//		return events.Metadata{"name": cqrs.JSONMarshaler{}.Name(e)}
//	}
//
// (or read Herald's messages with inbox.CQRSMarshaler instead).
//
// # SQLite
//
// SQLite has one write lock. db.Use (and relay.New and inbox.New) refuses an
// SQLite connection without a busy timeout, immediate transactions and WAL
// with [ErrSQLiteSettings], whose message names the DSN to open the file with;
// with modernc.org/sqlite (gorm.io/driver/sqlite with DriverName "sqlite"):
//
//	file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate
//
// and with mattn/go-sqlite3 (sqlite.Open):
//
//	file:app.db?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate
//
// Opened by its path alone, a file makes concurrent writers fail with
// "database is locked". An in-memory database passes only on a pool of one
// connection.
//
// # Notify
//
// Config.Notify is called once a transaction that wrote events committed:
// GORM's own, db.Transaction, db.Begin/Commit. For a transaction begun on a
// pool the plugin does not wrap (a *gorm.DB handle derived before db.Use that
// calls Begin itself, another plugin's pool, db.Connection's connection
// before a statement ran on it) it is called right after the write, and the
// relay re-checks at growing intervals until the commit shows.
package outboxhook
