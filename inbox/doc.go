// Package inbox gives Watermill handlers exactly-once effects over at-least-once
// delivery: a handler middleware that records each message id in the handler's
// own database transaction.
//
//	in, err := inbox.New(db, inbox.Config{})
//	router.AddMiddleware(in.Middleware)
//	router.AddConsumerHandler("ship-order", "orders", sub, func(msg *message.Message) error {
//		tx := inbox.Tx(msg.Context()) // the transaction the inbox opened
//		return tx.Create(&Shipment{OrderID: ...}).Error
//	})
//	go in.Run(ctx) // removes old inbox rows
//
// For each message the middleware begins a transaction and inserts (consumer,
// message id) with ON CONFLICT DO NOTHING before the handler runs. If the row
// existed, the message is a duplicate: it is acknowledged and the handler is not
// called. Otherwise the handler runs with the transaction in its message's
// context (Tx); its error, or a panic, rolls everything back, the inbox row
// included, and the message is nacked for redelivery; on success the transaction
// commits, then what the handler registered with AfterCommit runs, then the
// message is acknowledged. Two deliveries of one message at the
// same moment serialize on the row's key: the second waits and then sees a
// duplicate. The inbox costs one statement per message and no SELECT (but
// see Keys for the few ids earlier versions stored otherwise, Deduplication
// keys and Renaming a consumer).
//
// Messages the handler returns are not given back to the router, which would
// publish them after the commit (and lose them if that failed, since the
// redelivery is a duplicate): they are written to the outbox in the same
// transaction (outboxhook.AddMessages), and the relay publishes them. Aggregates
// saved through Tx go through the outbox hook as usual. The outbox hook must be
// registered on the *gorm.DB for either.
//
// The consumer defaults to the Watermill handler name; the message id is the
// Herald event id metadata key (events.MetaID), or else the message UUID.
//
// # Keys
//
// A consumer name and a message id are stored as given when they can be, and
// otherwise as "#sha256:" and the hex SHA-256 of their bytes, on every
// database ([MaxKeyBytes]): over 255 bytes, not storable as text (a NUL byte,
// invalid UTF-8), ending in a space (MySQL's and MariaDB's utf8mb4_bin
// collation ignores trailing spaces: "a" and "a " would be one key there), or
// beginning with "sha256:" or "#sha256:" (so that no id is stored as another
// one's hash). Any id deduplicates, and two ids are one key only if they are
// equal.
//
// Earlier versions stored some of these otherwise: as given (long ids on
// PostgreSQL and SQLite, NUL bytes and invalid UTF-8 on SQLite, and ids ending
// in a space or beginning with "sha256:" everywhere), or hashed under
// "sha256:". So that a message handled before the upgrade is not handled again
// when redelivered after it, the inbox also looks such a message up under those
// keys before its insert: a plain SELECT, which takes no lock (on MySQL and
// MariaDB no gap lock, below SERIALIZABLE), for those ids only (a UUID costs
// nothing). Until the earlier rows are gone, one such "sha256:" row stands for
// both ids it may have been (a long id, and the id equal to its hash), and on
// MySQL and MariaDB an earlier row whose id ends in a space still takes the id
// without the spaces for a duplicate. Instances of an earlier version and of
// this one running side by side do not serialize their concurrent deliveries of
// such an id. Once Retention has passed since the last instance of an earlier
// version stopped, and the cleaner has run since, no earlier row is left: set
// Config.DisableLegacyKeys to skip the lookup.
//
// # Deduplication keys
//
// A message id is one delivery of one event. Two events of one business intent
// (a command retried after a timeout that wrote a second event, a partner
// resending with a new id) have two ids, and would take effect twice. An event
// can carry a deduplication key the application chooses for its intent: the
// outbox hook stores the key of an event that implements events.Deduplicated
// (DedupKey() string) in its metadata (events.MetaDedupKey,
// "herald_dedup_key"; metadata given when the event is recorded wins), and the
// relay carries it in the message's metadata. A message that carries one is
// deduplicated by (consumer, key) instead of (consumer, message id): in the
// same transaction, the same table, for the same Retention, and two deliveries
// of one key at the same moment serialize as two of one id do. A key may have
// any length and bytes (through the outbox, metadata's rules apply: text
// without NUL bytes or line breaks); it is stored as "#sha256:key:" and the hex
// SHA-256 of its bytes, a form no message id is stored in (an id is stored as
// given only when it does not begin with "#sha256:", and hashed as "#sha256:"
// and exactly 64 hex digits), so a key never takes a message id for a
// duplicate, nor the other way round. Earlier versions recorded such a message
// by its id: unless Config.DisableLegacyKeys, the inbox also looks it up so, by
// a plain read that takes no lock.
//
// # Renaming a consumer
//
// The consumer is half of the key: renamed (a handler renamed, Consumer
// changed), a consumer is another one, and handles again what its former name
// handled within Retention. Config.FormerConsumers lists the names each
// consumer had before: a message recorded under one of them is a duplicate,
// found by a plain read that takes no lock, and new rows are written under the
// current name. Deploy the rename with the former name listed, keep it listed
// until Retention has passed since the last instance under the former name
// stopped, then remove it. Instances under the former name running beside
// renamed ones do not serialize their concurrent deliveries of one message with
// them. New checks, for each consumer FormerConsumers names, by one query
// that probes the primary key once per name: it warns when the consumer has
// no rows under its name but some under a former one (the rename is recent),
// or none under any (a former name misspelled?), and notes when no former name
// has rows left (it may be removed). A rename without FormerConsumers cannot
// be told from a new consumer, so nothing warns of it.
//
// # Retention
//
// Inbox rows older than Config.Retention are deleted in small batches by Run
// (or Cleanup). The window must outlast the longest time between two
// deliveries of one message: the relay's retry horizon
// (relay.Config.RetryHorizon) plus how long the broker may redeliver. Set
// Config.RetryHorizon to the relay's and New refuses a shorter Retention. The
// default, 24h, is far above the relay's default retry horizon (18.5
// minutes) and the redelivery windows of brokers, while keeping the table's
// size bounded (at 1,000 messages/s, 86 million rows).
//
// # Tracing
//
// Config.TracerProvider makes the consumer span each message is handled in:
// "process <topic>", kind consumer, parented to the producer span the message
// carries (traceparent/tracestate, injected by the relay), with the messaging
// attributes (system, destination, message id, consumer group = the
// consumer) and herald.duplicate. The handler's context (msg.Context(), and
// the transaction Tx returns) carries it, so the handler's own writes, and
// the events they record, continue the trace. It defaults to the global
// provider, a no-op until the application installs an SDK.
package inbox
