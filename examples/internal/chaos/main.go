// Command chaos proves Herald's promise with real processes and real faults,
// and a ledger: writers in this process (10% of their transactions rolled back
// after recording events), three relay processes in ordered mode, two consumer
// processes behind the inbox, and a private NATS JetStream server between them;
// each account's events go to one of two topics. While it runs it SIGKILLs a
// random relay or consumer every few seconds (and restarts it); stops the
// broker for 10s or more, each time right after a burst of events, while the
// relays' batches are in flight; now and then refuses the second topic for a
// while (shorter than half the relays' retry horizon) while the first carries
// light traffic; terminates every PostgreSQL backend of the relays and
// consumers once; and the relays crash on their own now and then right after
// the broker acknowledged a publish, before marking it. The relays retry with
// short backoffs and a small MaxAttempts, so that wrong deaths would show.
// With -poison N the writers also commit N events the relays' publisher
// always refuses.
//
// At the end it checks every committed event's effect happened exactly once
// (the poisoned excepted), no event of a rolled-back transaction was ever
// seen, per-aggregate order in the streams was never violated, the dead events
// are exactly the poisoned ones (none without -poison), and the outbox drained
// within 30s; it prints a table and exits 1 on any violation.
//
//	go run ./internal/chaos                      # the full run: 90s of faults
//	go run ./internal/chaos -duration 30s -outages 1 -kill-every 3s   # CI's short run
//	go run ./internal/chaos -poison 5            # and 5 events that must die
package main

import (
	"context"
	"fmt"
	"os"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "relay":
		err = runRelay(context.Background())
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
