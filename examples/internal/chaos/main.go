// Command chaos proves Herald's promise with real processes and real faults,
// and a ledger: writers in this process (10% of their transactions rolled back
// after recording events), three relay processes in ordered mode, two consumer
// processes behind the inbox, and a private NATS JetStream server between them;
// each account's events go to one of two topics. While it runs it SIGKILLs a
// random relay or consumer every few seconds (and restarts it); stops the
// broker for 10s or more, each time right after a burst of events, while the
// relays' batches are in flight; now and then refuses the second topic for a
// while (shorter than half the relays' retry horizon) while the first carries
// light traffic; cuts every database session of the relays and consumers
// once; and the relays crash on their own now and then right after the broker
// acknowledged a publish, before marking it. The relays retry with short
// backoffs and a small MaxAttempts, so that wrong deaths would show. With
// -poison N the writers also commit N events the relays' publisher always
// refuses.
//
// -db picks the database, a database of the run's own, dropped at the end:
//
//   - postgres (the default): a schema on HERALD_TEST_DATABASE_URL or
//     DATABASE_URL (by default the local server); the writers' commits wake
//     the relays through a Notifier (LISTEN/NOTIFY); the session fault is
//     pg_terminate_backend of the relays' and consumers' backends (found by
//     application_name).
//   - sqlite: one file in a temporary directory, in WAL mode, shared by the
//     writers' process and the relays' and consumers' processes; each
//     process's pool has one connection (one writer at a time). There is no
//     LISTEN/NOTIFY: the relays poll (-poll). There is no server, so no
//     sessions to cut: the table says so.
//   - mysql (MariaDB too): a database on HERALD_TEST_MYSQL_DSN (by default
//     root on 127.0.0.1:3306), and a user of its own for the relays and
//     consumers; the relays poll; the session fault is KILL CONNECTION of
//     that user's sessions on that database (the processlist).
//
// A server's URL (postgres://..., mysql://user:pass@host:port) may stand for
// the name.
//
// The host's faults (issue 19), each behind a flag: -long-tx keeps one
// writer's transaction open for a long time, writing thousands of events over
// thousands of new accounts; -hold-every makes a reader hold the outbox as
// pg_dump does; -operator-every requeues and purges dead events through the
// admin API; -pause-every stops a relay process (SIGSTOP) for 1.5 leases and
// resumes it; -relay-pool gives the relays a small connection pool;
// -partitions (PostgreSQL) runs the relays with retention by partition drop
// on 2s ranges. The relays' publisher errors always carry a NUL byte and
// invalid UTF-8. The writers' saves are timed (-judge-saves fails the run on
// one slower than -slow-save; on SQLite, on a transaction of a relay or a
// consumer that held the write lock that long).
//
// -storage wal writes the events in PostgreSQL's WAL (outboxhook.StorageWAL)
// on a private server at wal_level=logical, which the run restarts once; each
// relay process runs walrelay (one streams the slot, the others wait to take
// over), which runs, while it streams, the table relay of the events it
// parked (walrelay.Config.Parked).
//
// Issue 30's edges, each behind a flag: -savepoints makes a third of the
// writers' transactions set raw savepoints and roll back to them (tx.Exec, in
// every spelling the database accepts; half the writers through PrepareStmt
// sessions), the ledger booking an event undone by a ROLLBACK TO when a later
// save commits it; -drop-slot (-storage wal) drops the replication slot once:
// every relay must stop with walrelay.ErrSlot, the orchestrator starts afresh
// as the operator would (walrelay.RecreateSlot), and the events committed
// between the lost slot's last confirmed position and the new slot's start
// are listed as at risk, the only ones allowed lost; -fill-stream (-broker
// natsjs) makes the streams full (DiscardNew) for a while under a burst;
// -small-batch-limit (-broker kafka) sets the topics' max.message.bytes below
// a batch of events. Nothing may die of a full broker or a batch too large.
//
// Scheduled events (issue 33; not with -storage wal, which has none): the
// writers schedule -scheduled events a second (default 20) due 0.2-3s after
// their save (events.After or events.At; half under a key; in ordered mode 2
// in 5 apart from their account's order, the others in line), each with a
// reminder row in the same transaction, until 6s before the writes end; other
// goroutines cancel or move most of them (by id, or by key), half at their
// due time, racing the relays, in transactions that read and write the
// reminder, 1 in 5 rolled back after Cancel or Move returned. The relays write
// down each attempt to publish a scheduled event. The ledger checks that every
// scheduled event whose cancel did not commit (by the reminders, which also
// settle commits that failed) was applied, none was attempted or read before
// its due time (5ms allowed for the clock reads), none whose cancel committed
// was ever attempted, stored, read or applied, each carried the due time of
// its save or last committed move, and the reminders agree with what Cancel
// and Move returned; the events scheduled apart are left out of the order
// checks.
//
// At the end it checks every committed event's effect happened exactly once
// (the poisoned excepted), no event of a rolled-back transaction was ever
// seen, per-aggregate order in the streams was never violated, the dead events
// are exactly the poisoned ones (none without -poison; with -operator-every,
// also every dead event the operator sees before a requeue), and the outbox drained
// within 30s of the last write; it prints a table and exits 1 on any
// violation. A poisoned event dies of confirmed failures, which only later
// publishes confirm: after the faults, light traffic (20 saves/s, and 3 new
// accounts of 2 events every 100ms) goes on
// until every poisoned event is dead, for at most 30s.
//
//	go run ./examples/internal/chaos                      # the full run: 90s of faults
//	go run ./examples/internal/chaos -duration 20s -outages 1 -kill-every 3s   # CI's short run
//	go run ./examples/internal/chaos -poison 5            # and 5 events that must die
//	go run ./examples/internal/chaos -db sqlite           # on SQLite (or -db mysql)
//	go run ./examples/internal/chaos -duration 30s -outages 1 -kill-every 3s -poison 3 \
//	  -long-tx 10s -hold-every 5s -operator-every 2s -pause-every 8s -relay-pool 1 -judge-saves   # the host's faults
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/heraldgo/herald/walrelay"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "relay":
		err = runRelay(context.Background())
		if errors.Is(err, walrelay.ErrSlot) { // -drop-slot: the operator decides
			fmt.Fprintln(os.Stderr, "chaos: relay stopped:", err)
			os.Exit(exitSlotLost)
		}
	case len(os.Args) > 1 && os.Args[1] == "consumer":
		err = runConsumer(context.Background())
	default:
		var ok bool
		ok, err = orchestrate(os.Args[1:])
		if err == nil && !ok {
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
}
