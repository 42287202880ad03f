// Package relay moves committed outbox events to a Watermill publisher (NATS
// JetStream, RabbitMQ, Kafka, ...), at least once.
//
//	r, err := relay.New(db, publisher, relay.Config{})
//	err = r.Run(ctx) // blocks; returns when ctx is cancelled
//
// A cycle claims due events, publishes them with the event id as the message
// UUID, and marks them only after Publish returned nil: it deletes them, or sets
// processed_at when Config.Retention is set (a cleaner deletes them later). A
// failed publish (an error, a panic, or no return within PublishTimeout) counts
// an attempt and schedules a retry after a capped exponential backoff with
// jitter; after MaxAttempts the event is dead: kept, with the reason, until
// Requeue or RequeueAll. An event only dies if the publisher published
// something since the event first failed; otherwise, as in a broker outage, its
// failures may all be the broker's and the last attempt is retried instead, so
// an outage of any length kills no event. When a publish succeeds
// after a run of failed batches, every waiting retry becomes due at once. Retry state lives in the row, never in memory, so a
// relay that crashes loses nothing: the events are claimed again.
//
// # Modes
//
// Unordered (the default) claims with FOR UPDATE SKIP LOCKED in a transaction
// held while the batch publishes, so any number of instances share the work and
// an instance that dies releases its rows at once. It is the fastest mode; events
// of one aggregate may reach the broker in any order.
//
// Ordered (Config.Ordered) keeps each aggregate's events in commit order whatever
// the number of instances: aggregates are hashed into Partitions, and each
// partition is leased to one instance at a time (fair shares, renewed every third
// of LeaseDuration, taken over when an instance stops renewing). Within a batch
// the n-th events of all aggregates are published together, then the (n+1)-th;
// a failing event holds back only the later events of its own aggregate, until
// it is published or dead. An instance starts no publish it could not finish
// before its lease ends. All instances of one table must use the same mode.
//
// # Wake-ups
//
// Polling (PollInterval, 1s) is only the fallback. In the writer's process, set
// outboxhook.Config.Notify to the relay's Wake; in other processes, run a
// Notifier and set Notify to its Notify method: it sends a debounced NOTIFY on
// its own connection, which the relay LISTENs for. After a wake-up that finds
// nothing (the writer's transaction had not committed yet) the relay looks again
// after 1, 4, 16, ... milliseconds.
//
// # Faults
//
// Run never returns because of the database or the broker: it logs (at most once
// per 30s per kind), backs off with jitter, and resumes. On cancel it finishes or
// releases the batch in flight, within PublishTimeout and a margin.
//
// # Operating
//
// Stats and the Prometheus Collector report pending and dead counts and the age
// of the oldest pending event. The relay's role needs SELECT, UPDATE and DELETE
// on the outbox table; the relay creates its lease tables and indexes when
// missing (migrations/0001_relay.sql for a role without DDL rights). An index it
// may not create is only logged: it makes the relay faster, not correct. The
// lease tables of ordered mode are required.
package relay
