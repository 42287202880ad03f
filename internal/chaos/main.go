// Command chaos proves Herald's promise with real processes and real faults,
// and a ledger: writers in this process (10% of their transactions rolled back
// after recording events), three relay processes in ordered mode, two consumer
// processes behind the inbox, and a private NATS JetStream server between them.
// While it runs it SIGKILLs a random relay or consumer every few seconds (and
// restarts it), stops the broker for 10s or more, terminates every PostgreSQL
// backend of the relays and consumers once, and the relays crash on their own
// now and then right after the broker acknowledged a publish, before marking it.
// At the end it checks every committed event's effect happened exactly once, no
// event of a rolled-back transaction was ever seen, per-aggregate order in the
// stream was never violated, and the outbox drained within 30s; it prints a
// table and exits 1 on any violation.
//
//	go run ./internal/chaos                      # the full run: 90s of faults
//	go run ./internal/chaos -duration 30s -outages 1 -kill-every 3s   # CI's short run
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
