package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/tcpproxy"
)

// orchestrate runs the chaos run and reports whether every tenant's ledger
// is clean.
func orchestrate(args []string) (bool, error) {
	o, err := parseOptions(args)
	if err != nil {
		return false, err
	}
	began := time.Now()
	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()

	tmp, err := os.MkdirTemp("", "herald-fleetchaos-")
	if err != nil {
		return false, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := os.Mkdir(statusDir(tmp), 0o700); err != nil {
		return false, err
	}

	// The run's own server, stopped (by its data directory) and removed at
	// the end.
	ps, err := pgtest.StartServer("max_connections=300")
	if err != nil {
		return false, err
	}
	defer func() {
		if err := ps.Stop("immediate"); err != nil {
			fmt.Fprintln(os.Stderr, "fleetchaos:", err)
		}
	}()
	adm, err := openServerPool(ps.DSN, "fleetchaos_admin", 8)
	if err != nil {
		return false, err
	}
	defer closeDB(adm)
	srv := &server{PrivateServer: ps}
	if err := adm.Raw(`SHOW data_directory`).Row().Scan(&srv.data); err != nil {
		return false, err
	}
	if err := setupRoles(ctx, adm); err != nil {
		return false, err
	}
	// The MariaDB tenants: databases of the run's own on the shared server,
	// dropped at the end; the fleet reaches them through a proxy that each
	// outage cuts (the shared server itself is never stopped).
	mysqlServer, mysqlVia := mysqltest.Server(), ""
	refs := tenantRefs(o, tmp, pgtest.Name("herald_fc_")+"_")
	dropMySQL, err := createMySQL(ctx, mysqlServer, refs)
	if err != nil {
		return false, err
	}
	defer dropMySQL()
	var proxy *tcpproxy.Proxy
	if o.mysqlTenants > 0 {
		addr, err := mysqlAddr(mysqlServer)
		if err != nil {
			return false, err
		}
		if proxy, err = tcpproxy.Start(addr); err != nil {
			return false, err
		}
		defer proxy.Close()
		if mysqlVia, err = viaProxy(mysqlServer, proxy.Addr); err != nil {
			return false, err
		}
	}
	accounts, err := setupTenants(ctx, adm, ps.DSN, mysqlServer, refs, o.writers)
	if err != nil {
		return false, err
	}
	// What the set-up wrote checkpointed, so that a restart after the
	// outage's immediate shutdown has little to replay.
	if err := adm.Exec(`CHECKPOINT`).Error; err != nil {
		return false, err
	}
	setupTook := time.Since(began)

	// The run's stream on the shared NATS server, deleted at the end.
	topic := brokertest.Topic("fleetchaos")
	dropStream, err := makeStream(ctx, o.nats, topic)
	if err != nil {
		return false, err
	}
	defer dropStream()

	wpool, err := openServerPool(ps.DSN, "fleetchaos_writer", o.writers+2)
	if err != nil {
		return false, err
	}
	defer closeDB(wpool)
	wts, closeWriters, err := writerTenants(wpool, mysqlServer, refs, accounts, topic)
	if err != nil {
		return false, err
	}
	defer closeWriters()
	r, err := newReaders(adm, mysqlServer, refs)
	if err != nil {
		return false, err
	}
	defer r.close()

	// The fleet and consumer processes.
	self, err := os.Executable()
	if err != nil {
		return false, err
	}
	cs := &children{self: self, base: childConfig{DSN: ps.DSN, FleetDSN: userDSN(ps.DSN, fleetRole), MySQL: mysqlServer, MySQLVia: mysqlVia,
		NATS: o.nats, Topic: topic, Tenants: refs, Dir: tmp, Fleet: o.fleet, Fleets: o.fleets, Log: o.log}}
	defer cs.stop()
	for i := 1; i <= o.fleets; i++ {
		cs.start(&child{role: roleFleet, slot: i})
	}
	for i := 1; i <= o.consumers; i++ {
		cs.start(&child{role: roleConsumer, slot: i})
	}

	// Writers.
	led := newLedger(refs)
	pk := picker{n: len(wts), hot: o.hot, share: o.hotShare}
	start := time.Now()
	writeCtx, stopWriting := context.WithTimeout(ctx, o.dur)
	defer stopWriting()
	var ww sync.WaitGroup
	for w := range o.writers {
		ww.Go(func() { writer(writeCtx, w, o.writers, o.writeRate, wts, pk, led) })
	}

	// Faults: kills; the server's outages; one tenant's grants revoked.
	var (
		kills     atomic.Int64
		fw        sync.WaitGroup
		outageMu  sync.Mutex
		downs     []time.Duration
		downAt    []time.Time
		revokeRes *revokeFault
	)
	fleets := cs.of(roleFleet)
	fw.Go(func() {
		for outbound.Sleep(writeCtx, o.killEvery) {
			c := fleets[rand.IntN(len(fleets))]
			c.mu.Lock()
			name := c.instance
			c.mu.Unlock()
			if c.kill() {
				kills.Add(1)
				fmt.Fprintf(os.Stderr, "fleetchaos: %4.1fs SIGKILL %s\n", time.Since(start).Seconds(), name)
			}
		}
	})
	revoked := ""
	if o.revoke {
		revoked = refs[min(1, o.tenants-1)].ID // a hot one
	}
	fw.Go(func() {
		for i := range o.outages {
			// Evenly in the first two thirds of the run.
			at := o.dur * 2 * time.Duration(i+1) / time.Duration(3*(o.outages+1))
			if !outbound.Sleep(writeCtx, time.Until(start.Add(at))) {
				return
			}
			fmt.Fprintf(os.Stderr, "fleetchaos: %4.0fs the PostgreSQL server goes down for %v\n", time.Since(start).Seconds(), o.outageLen)
			when := time.Now()
			if proxy != nil {
				proxy.Down() // the MariaDB tenants too, for the fleet
			}
			d, err := srv.outage(o.outageLen)
			if proxy != nil {
				proxy.Up()
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "fleetchaos: outage:", err)
			}
			fmt.Fprintf(os.Stderr, "fleetchaos: %4.0fs the PostgreSQL server is back after %.1fs\n", time.Since(start).Seconds(), d.Seconds())
			outageMu.Lock()
			downs, downAt = append(downs, d), append(downAt, when)
			outageMu.Unlock()
		}
		if revoked == "" {
			return
		}
		// At 3/4 of the run, after the outages.
		if !outbound.Sleep(writeCtx, time.Until(start.Add(o.dur*3/4-o.revokeFor/2))) {
			return
		}
		fmt.Fprintf(os.Stderr, "fleetchaos: %4.0fs %s's grants revoked from the fleet's role for %v\n", time.Since(start).Seconds(), revoked, o.revokeFor)
		revokeRes = revoke(adm, revoked, o.revokeFor)
		if revokeRes.err != nil {
			fmt.Fprintln(os.Stderr, "fleetchaos: revoke:", revokeRes.err)
		}
		fmt.Fprintf(os.Stderr, "fleetchaos: %4.0fs %s's grants given back\n", time.Since(start).Seconds(), revoked)
	})

	// Progress, every 5s.
	progressDone := make(chan struct{})
	var pw sync.WaitGroup
	pw.Go(func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-t.C:
			}
			c, rb, unk := led.counts()
			cst := readConsumerStats(tmp, o.consumers)
			line := fmt.Sprintf("fleetchaos: %4.0fs committed %d, rolled back %d, unknown %d; effects written %d (retried early %d); kills %d",
				time.Since(start).Seconds(), c, rb, unk, cst.Applied, cst.Early, kills.Load())
			fmt.Fprintln(os.Stderr, line)
		}
	})
	defer func() { close(progressDone); pw.Wait() }()

	ww.Wait()
	fw.Wait()
	lastWrite := time.Now()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}

	// Drain: every committed deposit applied, nothing pending, within
	// o.drain. A tenant drained stays so (nothing writes any more): only
	// those behind are read again.
	drained := false
	behind := refs
	final := map[string]tcounts{}
	for time.Since(lastWrite) < o.drain {
		tc, err := r.counts(ctx, behind)
		if err == nil {
			var still []tenantRef
			for _, t := range behind {
				final[t.ID] = tc[t.ID]
				if c := tc[t.ID]; c.unapplied > 0 || c.pending > 0 {
					still = append(still, t)
				}
			}
			if behind = still; len(behind) == 0 {
				drained = true
				break
			}
		}
		if !outbound.Sleep(ctx, 250*time.Millisecond) {
			return false, ctx.Err()
		}
	}
	drainTook := time.Since(lastWrite)
	if !drained {
		var late []string
		for _, t := range behind {
			c := final[t.ID]
			late = append(late, fmt.Sprintf("%s (%d not applied, %d pending)", t.ID, c.unapplied, c.pending))
		}
		fmt.Fprintf(os.Stderr, "fleetchaos: not drained within %v: %s\n", o.drain, strings.Join(late[:min(len(late), 20)], ", "))
	}
	time.Sleep(500 * time.Millisecond) // late redeliveries, late publishes
	cs.stop()

	// The ledger.
	st, err := readStream(ctx, o.nats, topic)
	if err != nil {
		return false, err
	}
	vs, err := judgeAll(ctx, r, led, st)
	if err != nil {
		return false, err
	}
	files, err := readStatus(tmp)
	if err != nil {
		return false, err
	}
	slots, takeovers := shares(files)
	cstats := readConsumerStats(tmp, o.consumers)
	known := map[string]bool{}
	for _, t := range refs {
		known[t.ID] = true
	}
	untenanted := 0
	for _, m := range st.first {
		if !known[m.tenant] {
			untenanted++
		}
	}
	commits := led.commitTimes()
	quiet := o.fleet.MaxProbe + 2*time.Second // commits this long before an outage are published before it
	var firstDown time.Time
	outageMu.Lock()
	if len(downAt) > 0 {
		firstDown = downAt[0]
	}
	outageMu.Unlock()
	var (
		lat, latBefore []time.Duration
		slow           []stored
	)
	for _, m := range st.first {
		if at, ok := commits[m.id]; ok {
			d := max(m.at.Sub(at), 0)
			lat = append(lat, d)
			if firstDown.IsZero() || at.Before(firstDown.Add(-quiet)) {
				latBefore = append(latBefore, d)
			}
			slow = append(slow, m)
		}
	}
	// The slowest, to stderr: when they were committed and stored.
	slices.SortFunc(slow, func(a, b stored) int { return cmp.Compare(b.at.Sub(commits[b.id]), a.at.Sub(commits[a.id])) })
	for _, m := range slow[:min(len(slow), 5)] {
		fmt.Fprintf(os.Stderr, "fleetchaos: slow: %s account %s deposit %d committed at %.1fs, stored at %.1fs; served by %s\n",
			m.tenant, m.account, m.seq, commits[m.id].Sub(start).Seconds(), m.at.Sub(start).Seconds(),
			timeline(files, m.tenant, commits[m.id], m.at, start))
	}
	q, qBefore := quantiles(lat, 0.5, 0.9, 0.99, 1), quantiles(latBefore, 0.5, 0.9, 0.99, 1)
	// The SQLite tenants, on no server: published while the server was down?
	sqliteDuring := 0
	outageMu.Lock()
	for i, at := range downAt {
		for _, m := range st.first {
			if strings.HasPrefix(m.tenant, "sqlite_") && m.at.After(at) && m.at.Before(at.Add(downs[i])) {
				sqliteDuring++
			}
		}
	}
	outageMu.Unlock()

	// The report.
	ok := drained && untenanted == 0 && cstats.Untenanted == 0
	type group struct {
		name    string
		tenants int
		v       verdict
		unclean []string
	}
	groups := []*group{{name: "PostgreSQL (a schema each, one shared pool per fleet process)"}, {name: "SQLite (a file each, Tenant.Open)"},
		{name: "MariaDB (a database each, Tenant.Open, through a proxy cut in each outage)"}}
	var total verdict
	unclean := 0
	for _, t := range refs {
		g := groups[0]
		switch {
		case t.File != "":
			g = groups[1]
		case t.MySQL != "":
			g = groups[2]
		}
		v := vs[t.ID]
		g.tenants++
		g.v.add(v)
		total.add(v)
		if !v.clean() {
			g.unclean = append(g.unclean, t.ID)
			unclean++
			ok = false
		}
	}
	if !ok {
		printNotes(refs, vs, 10)
	}
	fmt.Printf("\nHerald fleet chaos run: %v of faults, %d tenants, %d fleet processes (members, TTL %v; ordered relays, lease %v), %d consumers behind each tenant's inbox, NATS JetStream stream %s\n\n",
		o.dur, len(refs), o.fleets, o.fleet.MemberTTL, o.fleet.Lease, o.consumers, topic)
	fmt.Println("| database | tenants | committed | rolled back | unknown outcome (committed) | effects | lost | ghosts (effects, stream) | duplicate effects | order violations (stream, effects) | pending | dead | unclean tenants |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	row := func(name string, n int, v verdict, bad []string) {
		b := fmt.Sprint(len(bad))
		if len(bad) > 0 {
			b += ": " + strings.Join(bad[:min(len(bad), 10)], ", ")
		}
		fmt.Printf("| %s | %d | %d | %d | %d (%d) | %d | %d | %d, %d | %d | %d, %d | %d | %d | %s |\n", name, n, v.committed, v.rolledBack,
			v.unknown, v.unknownCommitted, v.effects, v.lost, v.ghosts, v.ghostsStream, v.dups, v.orderStream, v.orderEffects, v.pending, v.dead, b)
	}
	for _, g := range groups {
		if g.tenants > 0 {
			row(g.name, g.tenants, g.v, g.unclean)
		}
	}
	var allBad []string
	for _, g := range groups {
		allBad = append(allBad, g.unclean...)
	}
	row("**total**", len(refs), total, allBad)

	fmt.Println("\n| fleet process | processes (member names) | tenants served, at some time | most at once | at the end | messages acknowledged (at least) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for i := 1; i <= o.fleets; i++ {
		s := slots[i]
		if s == nil {
			fmt.Printf("| fleet %d | 0 | 0 | 0 | 0 | 0 |\n", i)
			continue
		}
		names := make([]string, 0, len(s.names))
		for n := range s.names {
			names = append(names, n)
		}
		slices.Sort(names)
		fmt.Printf("| fleet %d | %d (%s) | %d | %d | %d | %d |\n", i, s.processes, strings.Join(names, ", "), len(s.served), s.peak, s.final, s.acked)
	}

	fmt.Println("\n| measure | value |")
	fmt.Println("|---|---:|")
	m := func(k string, v any) { fmt.Printf("| %s | %v |\n", k, v) }
	if proxy != nil {
		m("the MariaDB tenants' proxy: down with the PostgreSQL server in each outage (every connection of the fleet's cut)", mysqlServer)
	}
	m("set-up (server, tenants' tables)", fmt.Sprintf("%.1fs", setupTook.Seconds()))
	hot := "none"
	if o.hot > 0 {
		hot = fmt.Sprintf("%s..%s, %.0f%% of the writes", refs[0].ID, refs[o.hot-1].ID, 100*o.hotShare)
	}
	m("writers", fmt.Sprintf("%d, at most %d transactions/s together; hot tenants %s", o.writers, o.writeRate, hot))
	m("writer errors (outcome unknown: settled by the deposits table)", led.errs.Load())
	m("kills (SIGKILL of a fleet process; half started again under a new member name)", kills.Load())
	m("child restarts; exits not caused by the run", fmt.Sprintf("%d; %d", cs.restarts.Load(), cs.crashes.Load()))
	m("takeovers (a member starts serving a tenant another member served)", takeovers)
	outageMu.Lock()
	for i, d := range downs {
		m(fmt.Sprintf("PostgreSQL server down (immediate shutdown, by the postmaster's pid) at %.0fs", downAt[i].Sub(start).Seconds()), fmt.Sprintf("%.1fs", d.Seconds()))
	}
	if len(downs) < o.outages {
		m("PostgreSQL outages done", fmt.Sprintf("%d of %d", len(downs), o.outages))
		ok = false
	}
	outageMu.Unlock()
	if revoked != "" {
		switch rf := revokeRes; {
		case rf == nil:
			m("grants revoked from the fleet's role", revoked+": not done (the run ended first)")
			ok = false
		case rf.err != nil || rf.until.IsZero():
			m("grants revoked from the fleet's role", fmt.Sprintf("%s: failed: %v", revoked, rf.err))
			ok = false
		default:
			shown := shownFailing(files, revoked, rf.from, rf.until.Add(time.Second))
			others := 0
			for _, s := range st.first {
				if s.tenant != revoked && s.at.After(rf.from) && s.at.Before(rf.until) {
					others++
				}
			}
			m(fmt.Sprintf("grants of %s revoked from the fleet's role for %.1fs: shown failing by; its events pending at the grant; other tenants' messages stored meanwhile",
				revoked, rf.until.Sub(rf.from).Seconds()), fmt.Sprintf("%s; %d; %d", orNone(shown), rf.pendingAt, others))
			if others == 0 {
				ok = false // the other tenants must go on
			}
		}
	}
	m("consumers: deposits delivered before their account's previous one (retried)", cstats.Early)
	m("messages without a known tenant (stream; consumers)", fmt.Sprintf("%d; %d", untenanted, cstats.Untenanted))
	m("duplicates stored in the stream (allowed)", st.dups)
	ms := func(q []time.Duration) string {
		return fmt.Sprintf("%v / %v / %v / %v", q[0].Round(time.Millisecond), q[1].Round(time.Millisecond), q[2].Round(time.Millisecond), q[3].Round(time.Millisecond))
	}
	m(fmt.Sprintf("commit to stream, p50 / p90 / p99 / max (an idle tenant is probed every %v at most: the writers cannot Wake the fleet in other processes)", o.fleet.MaxProbe), ms(q))
	if !firstDown.IsZero() {
		m(fmt.Sprintf("commit to stream, commits %v or more before the server's first outage, p50 / p90 / p99 / max", quiet), ms(qBefore))
	}
	if o.sqliteTenants > 0 && len(downs) > 0 {
		m("SQLite tenants' messages stored while the PostgreSQL server was down (their fleet goes on)", sqliteDuring)
	}
	m("drain after the last write", fmt.Sprintf("%.1fs (limit %v, drained: %v)", drainTook.Seconds(), o.drain, drained))
	m("wall time", fmt.Sprintf("%.1fs", time.Since(began).Seconds()))
	if ok {
		fmt.Println("\nPASS: every tenant's ledger is clean: each committed deposit applied exactly once, in order, in its own tenant; nothing rolled back seen; nothing pending.")
		fmt.Println("fleetchaos: 1 passed, 0 failed")
	} else {
		fmt.Printf("\nFAIL: %d tenants' ledgers are not clean (see the tables; the details are on stderr).\n", unclean)
		fmt.Println("fleetchaos: 0 passed, 1 failed")
	}
	return ok, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
