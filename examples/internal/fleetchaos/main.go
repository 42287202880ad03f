// Command fleetchaos proves package fleet under faults, with a ledger per
// tenant: many tenants' outboxes, relayed by several fleet processes that
// share them through a control database (fleet.Config.Members), while the
// fleet processes are SIGKILLed, the database server is stopped, and one
// tenant's grants are revoked for a while.
//
// The run starts a PostgreSQL server of its own (internal/pgtest.StartServer,
// on a spare port, in a temporary directory) and makes there -tenants schemas,
// tenant_000, tenant_001, ..., each with its outbox and the ordered relay's
// tables (relay.Setup), an accounts table, a deposits table (the writers' own
// record of what committed), the consumers' inbox (inbox.New) and an effects
// table; and a schema "control" for the members. The first schema is made so;
// the others from its dump (pg_dump, its name replaced; the aggregate lock
// table's 65,536 rows copied in one statement), which is many times faster on
// a busy machine. With -sqlite-tenants K, K more tenants are SQLite files,
// opened by the fleet through Tenant.Open; with -mysql-tenants M, M more are
// databases of the run's own on the shared MariaDB server (dropped at the
// end), opened by the fleet through Tenant.Open and a TCP proxy that each
// outage cuts (every connection of the fleet's dropped, new ones refused).
//
// In this process, writers save accounts, each save one numbered deposit
// (aggregate.Root and outboxhook, one event per transaction, 10% of the
// transactions rolled back after recording theirs), about -write-rate
// transactions a second over all tenants, the first -hot tenants taking
// -hot-share of them. -fleets processes (children running this binary with
// the role "fleet") each run a fleet.Fleet over every tenant (one shared pool
// for the schemas, each tenant a table of it) in ordered mode, as a role of
// their own (fleetchaos_fleet, granted what they need in each schema), and
// publish through Herald's JetStream publisher (publishers/natsjs) to a stream
// of the run's own on the NATS server -nats (the local one by default),
// deleted at the end. Each serves the tenants that hash to it among the live
// members. -consumers processes (the role "consumer") read the stream and
// apply each deposit in the database of its tenant (the message's
// events.MetaTenant), behind that tenant's inbox: the effect row is written
// in the inbox's transaction, and only once the account's previous deposit
// was applied (one that comes early is nacked and comes again), so an
// account's effects are applied in the order of its deposits or not at all.
//
// Faults: every -kill-every a random fleet process is SIGKILLed and started
// again (every other time under a new member name: the others see a member
// leave and one join; else under its old one: it finds its own partition
// leases); -outages times the PostgreSQL server is stopped (an immediate
// shutdown: SIGQUIT to its postmaster, by pid) for -outage and started again;
// with -revoke, a hot tenant's grants are revoked from the fleet's role for
// -revoke-for and given back (the other tenants must go on meanwhile). The
// fleet processes write what they serve to the run's directory, from which
// the run counts the tenants each served and the takeovers (a member starts
// serving a tenant another member served).
//
// At the end the writers stop, the fleet drains (at most -drain), and the
// ledger judges each tenant: lost (a committed deposit without its effect),
// ghosts (an effect, or a message in the stream, of a deposit that did not
// commit), duplicate effects, order violations (in the stream, read back
// whole: an account's deposit first stored after a later one; and in the
// effects: one applied after a later one), and events still pending or dead in
// the outbox. It prints a summary per database with the totals, the fleet
// processes' shares and the takeovers, and exits 1 if any tenant's ledger is
// not clean (2 if the run could not be made). It removes what it made: the
// child processes, the server and its directory, its own directory, the
// stream.
//
//	go run ./examples/internal/fleetchaos -tenants 200 -duration 20s   # CI's short run
//	go run ./examples/internal/fleetchaos -tenants 1000 -duration 2m -sqlite-tenants 10
package main

import (
	"context"
	"fmt"
	"os"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == roleFleet:
		err = runFleet(context.Background())
	case len(os.Args) > 1 && os.Args[1] == roleConsumer:
		err = runConsumer(context.Background())
	default:
		var ok bool
		ok, err = orchestrate(os.Args[1:])
		if err == nil && !ok {
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetchaos:", err)
		os.Exit(2)
	}
}
