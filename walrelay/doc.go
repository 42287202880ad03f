// Package walrelay publishes the events that outboxhook writes with
// StorageWAL: logical messages in PostgreSQL's write-ahead log, which exist
// iff the transaction that saved them committed. The relay streams a
// replication slot of its own (pgoutput, protocol 1, messages on, through a
// publication of its own with no tables) on a replication connection, in
// commit order, and publishes each Herald message (of Config.Prefix; other
// messages and prefixes are skipped) to a Watermill publisher as the same
// message the table relay publishes (relay.NewMessage).
//
// Status: experimental. The WAL mode works and is tested, but its API may
// change before 1.0, and it lacks what the table relay has (see
// docs/wal.md, "Not there yet"). The outbox table (outboxhook's default
// storage) is the stable mode.
//
//	r, err := walrelay.New(dsn, publisher, walrelay.Config{})
//	if err != nil { ... }
//	err = r.Run(ctx) // until ctx is cancelled
//
// # At least once
//
// The relay tells the slot it may drop the WAL up to a transaction's commit
// only once the publisher returned for every event of that transaction and
// of every transaction before it. After a crash, a restart or a lost
// connection the server streams again from the last position confirmed, so
// an event is published at least once: consumers deduplicate by its id (the
// message UUID), as with the table relay. While no Herald event is in
// flight the relay confirms the position the server reports, so a slot with
// no traffic of its own does not hold WAL back.
//
// # Pipelining and batches
//
// While the relay publishes, it reads on: a reader goroutine receives and
// parses the stream, decoder goroutines (up to 4, GOMAXPROCS at most)
// decode its events (the reader decodes a chunk of a few itself when
// nothing else waits for the publisher), and up to 64 chunks of it (a
// transaction or at most 64 of its events each) wait, decoded, for the
// publisher. When the publisher returns and several events are there
// already, the next call carries them all, up to Config.BatchSize, in
// stream order: one
// PublishBatch call per run of events of one topic when the publisher is a
// relay.BatchPublisher (a result per message), else one Publish call per
// run. The relay never waits for more events to fill a call: one event
// alone goes at once. In ordered mode a call carries at most one event of
// each aggregate, so that its result decides what the aggregate's next
// event does (held, parked, or published). The position is confirmed as
// before: past a transaction only once each of its events and of those
// before it was published or parked, whatever calls carried them. The
// calls are made on one worker goroutine, one at a time; one that has not
// returned after Config.PublishTimeout fails, and its worker is left to
// finish it and end (a publisher that never returns keeps it for ever:
// nothing can stop it), while a new one makes the next calls. These
// goroutines are the stream's: they end with it.
//
// Failures map onto the rules below call by call. A Publish call of several
// events that fails tells nothing of which failed (and the broker may have
// taken some): its events are published again at once, one call each, as
// the table relay does, and those calls count, not the failed one (which
// confirms nothing, and leaves a lone failed call before it no longer alone:
// its event stays held and is tried again). A PublishBatch call reports each message: an error
// wrapping relay.ErrRejected parks its event at once; the acknowledged
// ones count as a successful call, which confirms a lone failed call before
// it; each other failure counts as a failed call after it (a message
// acknowledged in the same call confirms nothing, as in the table relay),
// so that one alone is confirmed, and its event parked, by the next
// successful call, and two or more (the broker may have gone away in the
// middle of the call) are an outage, which parks nothing. Held events are
// retried one call each.
//
// # Telemetry
//
// With Config.TracerProvider (otel.GetTracerProvider() by default) each
// event is published in a producer span "publish <topic>", parented to the
// trace context stored with it and injected into the message, as the table
// relay does: the publish call is the same code.
//
// With Config.MeterProvider (otel.GetMeterProvider() by default, a no-op
// until the application installs an SDK) the relay counts, with a slot
// attribute: herald.wal.published (events the publisher acknowledged),
// herald.wal.failed (failed attempts, one per event of each failed call,
// those of a failed Publish call of several events, published again one by
// one at once, not counted), herald.wal.parked (events written to the
// outbox table: refused, or behind a refused one of their aggregate), and
// records herald.wal.publish.duration (seconds, each publish call). Through
// OpenTelemetry's Prometheus exporter: herald_wal_published_total,
// herald_wal_failed_total, herald_wal_parked_total and
// herald_wal_publish_duration_seconds. ObserveSlot makes the slot's gauges.
//
// # What it costs the server
//
// A slot keeps every WAL segment from its confirmed position on, whether a
// relay reads it or not: a relay stopped for good must have its slot
// dropped (SELECT pg_drop_replication_slot('herald')), or the server's disk
// fills (max_slot_wal_keep_size bounds it, at the price of a slot the
// server invalidates: Run then fails rather than skip events). A running
// relay holds one replication connection (a walsender, of max_wal_senders)
// and, while it sets up, one ordinary connection. It keeps a row per slot in
// a table of its own (SlotMarkerTable, herald_wal_slots, beside
// Config.Table): created once (DDL, when missing), a row written when the
// slot is made, and updated when a relay connects (Run's start, a
// reconnection) and finds the slot's confirmed position moved; never per
// event.
//
// # Lost slots
//
// A slot is the server's, not the database's: pg_drop_replication_slot
// removes it, and a standby promoted after a failover has none (before
// PostgreSQL 17's failover slots). A slot made again at the end of the WAL
// would skip every event committed after the old slot's last confirmed
// position, and report no problem. The relay never does that on its own: a
// slot that existed and is missing (or was invalidated) stops Setup and Run
// with a [SlotLostError] (wrapping [ErrSlot]) that names the last confirmed
// position known. It knows a slot existed from its row in SlotMarkerTable,
// which is replicated with the rest of the database (to a standby, into a
// backup), or because this Relay set it up or streamed it (a slot dropped
// between two connections of one Run). Only the first start makes a slot
// with no questions: no row, no slot. Several relays on one slot (one
// streams, the others wait to take over) all stop; none makes it again.
//
// The operator decides: find the events committed after that position (the
// application's own records, or the old primary's WAL), then start afresh
// with RecreateSlot (herald wal recreate), which makes the slot at the
// current end of the WAL (dropping an invalidated one first) and reports
// both positions: events committed after the last confirmed one and before
// the new start may never have been published. Config.RecreateLostSlot
// does the same in Setup and Run, logging the positions at Error: it
// trades that check for availability, for every later loss too. Drop
// (herald wal drop) forgets the slot's row: a relay retired on purpose and
// set up again is a first start.
//
// # What it needs
//
// wal_level=logical ([ErrWALLevel] otherwise), a role with the REPLICATION
// right ([ErrReplicationRight]), and, the first time, the rights to create
// the publication and the slot (Setup, which Run calls). On the outbox
// table (Config.Table): SELECT, INSERT and UPDATE, and the right to create
// it when it is missing; on SlotMarkerTable: SELECT, INSERT and UPDATE
// (DELETE for Drop), and the right to create it when it is missing.
//
// # Refused events
//
// An event the broker refuses does not hold the others back: the relay
// parks it, writing it as an ordinary row of the outbox table
// (Config.Table, the table mode's, created when missing) with the driver's
// insert, its attempt counted (attempts and strikes 1), its last error, due
// at once. A table relay on that table retries it with its backoff and, at
// its MaxAttempts-th strike, makes it dead, where the admin package and the
// herald command show it: without one, parked events stay in the table.
// With Config.Parked the relay runs that table relay itself while it
// streams the slot, with itself as its relay.Config.Confirmer: a strike is
// a confirmed failure, the table holds little else to confirm one, and the
// WAL's publishes do; with several relays on one slot only the streaming
// one runs it. A table relay run beside each instance instead (relay.New,
// this relay as its Confirmer, the same publisher) confirms nothing while
// its instance's relay waits for the slot: an event whose refusal does not
// wrap relay.ErrRejected parked in one of its partitions is retried, not
// killed, until that instance streams (without a Confirmer, for ever).
// The slot's position moves past an event
// only once it was published or its row committed.
//
// A failure is the event's own, and the event parked, when the publisher's
// error wraps relay.ErrRejected, or when it was the only failed call
// between two that succeeded (a later event, or a retry, was published).
// Two or more failed calls in a row may be a broker outage, which parks
// nothing: the events are held in memory (at most Config.MaxHeld; then the
// relay reads no further until some are settled) and tried again in turns,
// one call every Config.RetryInterval while they fail; while calls fail in
// a row, new events are held untried. The first call that succeeds after
// them starts a new turn at once, in stream order, and none of the failures
// before it is counted against its event; after a failed call in a turn the
// next call is of the event that failed least often, so that two events
// that always fail are not tried back to back for ever. An outage that ends between one
// failed call and the next can park that one event, which the table relay
// then publishes: nothing is lost either way. While nothing fails, events
// are published in commit order; once some are held, Config.Ordered says
// what order holds.
//
// # Ordered mode
//
// With Config.Ordered (and the table relay on Config.Table in ordered mode,
// relay.Config.Ordered) each aggregate's events reach the broker in commit
// order, first deliveries counted, whether they go from the WAL or through
// the table, and a parked event holds back only the later events of its own
// aggregate, until it is published or dead:
//
//   - WAL to table: the later events of an aggregate with a held event are
//     held behind it, untried, and parked with it, behind it, in one
//     transaction; the events of an aggregate with events in the table that
//     are neither published nor dead (processed_at and dead_at null) are
//     parked behind them. The table relay publishes an aggregate's rows in
//     insertion order.
//   - Table to WAL: the relay looks, at each event of an aggregate it
//     parked, whether the aggregate still has such rows; once none is left
//     (the table relay published or killed the last), its events are
//     published from the WAL again, after all of them.
//   - Each stream (at Run's start, after a reconnection, a takeover) first
//     reads which aggregates have such rows, whoever wrote them (another
//     relay before a takeover, or table-mode writers); after that it looks
//     only for the aggregates it parked itself, so rows an application
//     writes in table mode meanwhile keep no order with the WAL's.
//
// A dead event is skipped (published, if ever, when it is requeued, after
// the later ones), as in the table relay's ordered mode; redeliveries
// (at least once) may repeat an event after later ones. Events of no
// aggregate have no order. The held events of one aggregate behind an event
// whose failures nothing confirms (no other publish succeeds) can fill
// Config.MaxHeld, and then hold every later event back until it is
// published or confirmed. Without Config.Ordered a parked event holds back
// nothing, and held events are retried in turns: across an outage or a
// refusal, events reach the broker in any order.
//
// # One relay per slot
//
// The server lets one session stream a slot at a time. A second relay (in
// another process, say, for failover) on a slot in use waits: Run tries to
// start streaming every Config.RetryInterval, logging at Info once and at
// Debug after, and streams as soon as the first relay's stream ends (it
// stopped, or lost its connection: at once when its process exited, when
// the server's wal_sender_timeout, 60s by default, passes for a host that
// vanished), from the position the first confirmed. Events the first
// published and had not confirmed are published again (at least once).
package walrelay
