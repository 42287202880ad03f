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
// A failed publish (an error, a panic, or no return within PublishTimeout) is
// an attempt (the attempts column) and schedules a retry, by the database's
// clock, as the retry policy decides (Config.RetryPolicy; by default
// DefaultRetryPolicy: a capped exponential backoff with jitter, from
// Config.MinBackoff to MaxBackoff); nothing makes it due earlier, whatever
// other events do, except the recovery from an outage (below). A failure is
// also a strike (the strikes column) when it is confirmed: a Publish call of
// the same batch, in the same process, that started after the failed call
// returned succeeded, so the publisher worked after the failure and the
// failure is the event's own (or, with Config.Confirmer, a publish call
// that the Confirmer saw succeed began after it, within 500ms of it: the
// WAL relay whose parked events the relay publishes). Only this process's monotonic clock decides
// that; the application's and the database's clocks are never compared.
// After MaxAttempts strikes the event is dead: kept, with dead_at and the
// reason, until it is requeued (admin.Outbox.Requeue and the rest).
// Hence:
//
//   - A broker outage adds no strike, however long, whenever it begins
//     (before, during or between batches), in both modes and with any
//     number of instances (each trusts only its own calls); only an outage
//     that ends within the batch an event failed in can confirm that
//     failure: at most one strike per failed call.
//   - A failing event dies no sooner than its backoff schedule allows: its
//     MaxAttempts-th failure comes about Config.RetryHorizon after its first
//     (at least half of it, with jitter; only an outage's recovery can bring
//     a retry of it forward, once per outage).
//   - A failure nothing confirms is retried every MaxBackoff, for ever: a
//     topic the broker refuses while no other traffic flows, a hang that
//     leaves its batch no time to publish after it (an unordered batch starts
//     no call later than 2 PublishTimeouts after its claim, and a hang costs
//     two). Stats.Failing and herald_outbox_failing count such events,
//     OldestPending ages, and the log names the topic, at most once per 30s
//     per topic.
//
// In ordered mode the layers of a batch publish one after the other, so a
// success in a later layer confirms the failures of earlier ones; in
// unordered mode a failed chunk is retried one event at a time, so the
// events published after a failing one confirm it. A publisher that reports
// a result per message (BatchPublisher) is called once per chunk: exactly the
// failed messages are retried, and a later call of the batch that
// acknowledged a message confirms them. Rows that cannot be decoded die at
// once.
//
// An outage, to an instance, is two or more of its batches in a row that
// failed and published nothing, one of whose failures was an event's first
// attempt. The first batch that publishes again makes due the retries of the
// events that failed since that streak began, for each topic and event type
// that batch (or a later one, within MaxBackoff) publishes, rather than
// waiting out backoffs that grew while the broker was away. A topic or type
// the broker keeps refusing is never made due by other traffic.
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
// # Sweeps
//
// Where claims start from a remembered position (PostgreSQL), a claim does
// not start at the head of the outbox's index, where the entries of
// published rows lie until vacuum removes them (and, while any transaction
// holds back vacuum's horizon, stay: every claim from the head would walk
// them all), but after the last event it claimed, less what may still commit
// below it. The sweep, every Config.SweepInterval in a cycle of its own,
// finds what comes back below the position in ways the claims cannot see:
// events another instance claimed and released by dying, events requeued by
// another process in a long transaction (unordered mode: it claims a batch
// from the head; ordered mode: it looks for due events below the positions
// of its partitions and lowers them). A sweep walks the dead entries the
// claims skip, so the next waits at least 200 times as long as the last
// one's scan took: sweeping takes at most 0.5% of the database's time.
// Publishing what a sweep found does not count: the next sweep starts at
// most max(SweepInterval, 200 × the last scan) after the last one ended,
// however slow the broker.
//
// # Retention by partition drop
//
// With Config.DropPartitions (PostgreSQL) the outbox is a table partitioned
// by occurred_at into ranges PartitionInterval wide (Setup or Run creates it
// so when missing; the migrations have the same as a variant,
// migrations.PostgresPartitioned). The cleaner creates the ranges ahead of
// time and drops a partition once its range ended more than Retention ago
// and every event in it was published more than Retention ago. Dropping a
// partition removes its rows at once, with nothing for vacuum to do, however
// many there are; but it takes an ACCESS EXCLUSIVE lock on the outbox for a
// moment, and so does creating a partition (each waits at most 200 ms for
// transactions that read, write or claim from the table, such as a pg_dump,
// while those that come after wait behind it; retried at the next cleanup
// when it times out). A pending or dead event keeps its whole partition (and
// is deleted with it only once published, or purged); events whose
// occurred_at is outside every range (more than a range ahead of the
// database's clock, or in a range already dropped) go to a default partition
// cleaned row by row; the key is (id, occurred_at). The Table name may be at
// most 46 bytes (the partitions' names add 17 to it). An outbox that is not
// partitioned is cleaned row by row, with a warning.
//
// # Telemetry
//
// Config.TracerProvider makes the producer span each event is published in:
// "publish <topic>", kind producer, parented to the trace context of the
// request that saved the event (stored with it by the outbox hook), with the
// messaging attributes (system, destination, message id); the span is
// injected into the message (traceparent/tracestate) for the consumer.
// Config.MeterProvider makes the relay's metrics (see Relay.Stats for the
// figures): herald.relay.published, herald.relay.failed, herald.relay.dead
// (counters), herald.relay.publish.duration (histogram, seconds), and the
// gauges herald.outbox.pending, herald.outbox.failing, herald.outbox.dead and
// herald.outbox.oldest_pending_age (seconds), all with a table attribute.
// Through OpenTelemetry's Prometheus exporter they read
// herald_relay_published_total, herald_outbox_pending, ... Both default to
// the global providers, no-ops until the application installs an SDK.
//
// # Wake-ups
//
// Polling (PollInterval, 1s) is only the fallback. In the writer's process, set
// outboxhook.Config.Notify to the relay's Wake; in other processes, run a
// Notifier and set Notify to its Notify method: it sends a debounced NOTIFY
// (one statement on a connection of its pool), which the relay LISTENs for on
// a connection it opens outside the pool of its handle (one more connection to
// the database per relay). For a fleet's tenant, set Notify to the
// Notifier's Tenant(id): its notifications name the tenant, which a
// TenantListener (fleet.Config.Listen) wakes alone. After a wake-up that finds
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
// Stats and the gauges above report pending, failing (attempts > 0) and dead
// counts and the age of the oldest pending event; the admin package and the
// herald command show the failing and dead events with their last errors. Failing events that
// never die are the sign of a topic the broker refuses while nothing else is
// published; the log names the topic and the error. The common cause: with
// the default topic (the event type, such as "order.paid"), watermill-nats
// with JetStream refuses every publish ("nats: invalid stream name": a stream
// name cannot contain '.'); map event types to valid topics with
// outboxhook.Config.Topic. The relay's role needs SELECT, UPDATE and DELETE
// on the outbox table; the relay creates its lease tables and indexes when
// missing (for a role without DDL rights, apply them beforehand with
// [github.com/heraldgo/herald/migrations], or the SQL files it lists). An index it
// may not create is only logged: it makes the relay faster, not correct. The
// lease tables of ordered mode are required.
package relay
