// Package relay moves committed outbox events to a Watermill publisher (NATS
// JetStream, RabbitMQ, Kafka, ...), at least once.
//
//	r, err := relay.New(db, publisher, relay.Config{})
//	err = r.Run(ctx) // blocks; returns when ctx is cancelled
//
// A cycle claims due events, publishes them with the event id as the message
// UUID, and marks them only after Publish returned nil: it deletes them, or sets
// processed_at when Config.Retention is set (a cleaner deletes them later).
// Retry state lives in the row, never in memory, so a relay that crashes loses
// nothing: the events are claimed again.
//
// # Retries and death
//
// A failed publish (an error, a panic, or no return within PublishTimeout)
// counts an attempt and schedules a retry after a capped exponential backoff
// with jitter, by the database's clock; nothing makes it due earlier, whatever
// other events do, except the recovery from an outage (below). A failure is
// also a strike when it is confirmed: a Publish call of the same batch, in
// the same process, that started after the failed call returned succeeded
// (the process's monotonic clock decides; no two clocks are compared). After
// MaxAttempts strikes the event is dead: kept, with the reason, until Requeue
// or RequeueAll. So a broker outage, however long and whenever it begins,
// kills nothing and adds no strike, with any number of instances (only an
// outage that ends inside the batch of a failure confirms that one failure);
// a failing event dies no sooner than its backoff schedule allows, about
// Config.RetryHorizon after its first failure; and a failure nothing confirms
// (a refused topic with no other traffic) is retried every MaxBackoff for
// ever, counted by Stats.Failing and logged with its topic, at most once per
// 30s per topic. Rows that cannot be decoded die at once.
//
// An outage, to an instance, is two or more of its batches in a row that
// failed and published nothing, one of whose failures was an event's first
// attempt. After one, each topic and event type the instance publishes again
// (within MaxBackoff) has the retries of its events that failed since the
// outage began made due at once, rather than waiting out backoffs that grew
// while the broker was away. A topic or type the broker keeps refusing is
// never made due by other traffic.
//
// # Modes
//
// Unordered (the default) claims with FOR UPDATE SKIP LOCKED in a transaction
// held while the batch publishes, so any number of instances share the work and
// an instance that dies releases its rows at once (SQLite, which has no row
// locks, leases the rows instead). It is the fastest mode; events of one
// aggregate may reach the broker in any order. On MySQL that transaction runs
// at READ COMMITTED, whatever the session's default: at REPEATABLE READ its
// gap locks would make the application's saves wait for the publish.
//
// Ordered (Config.Ordered) keeps each aggregate's events in commit order whatever
// the number of instances: aggregates are hashed into Partitions, and each
// partition is leased to one instance at a time (fair shares, renewed every third
// of LeaseDuration, taken over when an instance stops renewing). Within a batch
// the n-th events of all aggregates are published together, then the (n+1)-th;
// a failing event holds back only the later events of its own aggregate, until
// it is published or dead. An instance starts no publish it could not finish
// before its lease ends (by its monotonic clock, checked right before each
// Publish call). An instance paused past its lease (GC, SIGSTOP, a VM freeze)
// writes nothing once another took the partition over: every write of a batch
// checks, in its statement, the generation of the partition's lease the batch
// began under, which each takeover bumps. All instances of one table must use
// the same mode.
//
// # Wake-ups
//
// Polling (PollInterval, 1s) is only the fallback. In the writer's process, set
// outboxhook.Config.Notify to the relay's Wake; in other processes, run a
// Notifier and set Notify to its Notify method: it sends a debounced NOTIFY
// (one statement on a connection of its pool), which the relay LISTENs for on
// a connection it opens outside the pool of its handle (one more connection to
// the database per relay). After a wake-up that finds
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
// Stats and the Prometheus Collector report pending, failing (attempts > 0)
// and dead counts and the age of the oldest pending event. Failing events that
// never die are the sign of a topic the broker refuses while nothing else is
// published; the log names the topic and the error. The common cause: with
// the default topic (the event type, such as "order.paid"), watermill-nats
// with JetStream refuses every publish ("nats: invalid stream name": a stream
// name cannot contain '.'); map event types to valid topics with
// outboxhook.Config.Topic. The relay's role needs SELECT, UPDATE and DELETE
// on the outbox table; the relay creates its lease tables and indexes when
// missing (migrations/0001_relay.sql for a role without DDL rights). An index it
// may not create is only logged: it makes the relay faster, not correct. The
// lease tables of ordered mode are required.
package relay
