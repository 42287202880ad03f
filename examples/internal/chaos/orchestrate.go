package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// ledger is what the writers know: every event of a committed transaction,
// every event of a rolled-back one, and which events were poisoned.
type ledger struct {
	mu            sync.Mutex
	committed     map[string]time.Time // when its transaction returned
	rolledBack    map[string]struct{}
	poisoned      map[string]struct{} // committed, and refused by the relays' publisher for ever
	poisonUnknown map[string]struct{} // poisoned, in a transaction whose outcome is unknown
	writeErrs     int64
}

func newLedger() *ledger {
	return &ledger{committed: map[string]time.Time{}, rolledBack: map[string]struct{}{},
		poisoned: map[string]struct{}{}, poisonUnknown: map[string]struct{}{}}
}

// record books the events of one transaction by its outcome err and reports
// whether it committed.
func (l *ledger) record(ids []string, err error, poison bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	add := func(m map[string]struct{}) {
		for _, id := range ids {
			m[id] = struct{}{}
		}
	}
	switch {
	case err == nil:
		now := time.Now()
		for _, id := range ids {
			l.committed[id] = now
		}
		if poison {
			add(l.poisoned)
		}
	case errors.Is(err, errRollback):
		add(l.rolledBack)
	default:
		l.writeErrs++
		if poison {
			add(l.poisonUnknown)
		}
	}
	return err == nil
}

// counts returns the committed events, and those of them that are poisoned.
func (l *ledger) counts() (committed, poisoned int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.committed), len(l.poisoned)
}

// child is a relay or consumer process, restarted by its supervisor when it dies.
type child struct {
	role, id string
	mu       sync.Mutex
	cmd      *exec.Cmd
}

func (c *child) kill() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return false
	}
	return c.cmd.Process.Signal(syscall.SIGKILL) == nil
}

// options are the chaos run's flags.
type options struct {
	dur, killEvery, outageLen, refuseFor, refuseEvery time.Duration
	outages, writers, accounts, crashOneIn, poison    int
	writeRate                                         int // the writers' transactions per second, together (0: no limit)
	burstAccounts, burstEvents                        int
	relay                                             relaySettings
	db, dbServer                                      string        // the database's kind, and its server (empty: the default)
	poll                                              time.Duration // the relays' PollInterval
	unordered                                         bool          // relays in unordered mode: order is not promised
	host                                              hostOptions
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	dbFlag := fs.String("db", postgresDB, "the database: postgres, sqlite or mysql (MariaDB too), or a postgres:// or mysql://user:pass@host:port URL of a server on which the run makes a database of its own")
	fs.DurationVar(&o.poll, "poll", 0, "the relays' PollInterval (default: 200ms on postgres, where LISTEN/NOTIFY wakes them; 100ms on sqlite and mysql, where polling is all they have)")
	fs.DurationVar(&o.dur, "duration", 90*time.Second, "how long writers write and faults fly")
	fs.DurationVar(&o.killEvery, "kill-every", 2*time.Second, "SIGKILL a random relay or consumer this often")
	fs.IntVar(&o.outages, "outages", 2, "broker outages (each at least -outage), each begun under a burst of events")
	fs.DurationVar(&o.outageLen, "outage", 10*time.Second, "length of one broker outage")
	fs.IntVar(&o.burstAccounts, "burst-accounts", 30, "accounts of the burst written right before each outage")
	fs.IntVar(&o.burstEvents, "burst-events", 100, "events per burst account")
	fs.DurationVar(&o.refuseFor, "refuse-for", 0, "length of a window in which the relays refuse the second topic, with light traffic on the first (default: 40% of the relays' retry horizon)")
	fs.DurationVar(&o.refuseEvery, "refuse-every", 5*time.Second, "about how often a refusal window comes (0: none)")
	fs.IntVar(&o.writers, "writers", 8, "writer goroutines")
	fs.IntVar(&o.writeRate, "write-rate", -1, "the writers' transactions per second, all together; 0: as fast as they go (default: 0, but 400 on sqlite, where the consumers need the one write lock as often as the writers)")
	fs.IntVar(&o.accounts, "accounts", 400, "aggregates")
	fs.IntVar(&o.crashOneIn, "crash-one-in", 400, "a relay kills itself after one successful Publish call in this many")
	fs.BoolVar(&o.unordered, "unordered", false, "run the relays in unordered mode (order violations are then reported, not failures)")
	fs.IntVar(&o.poison, "poison", 0, "events the relays' publisher always refuses: exactly these must end dead")
	fs.IntVar(&o.relay.maxAttempts, "max-attempts", 5, "the relays' MaxAttempts: small, so that deaths can happen")
	fs.DurationVar(&o.relay.minBackoff, "min-backoff", 100*time.Millisecond, "the relays' MinBackoff")
	fs.DurationVar(&o.relay.maxBackoff, "max-backoff", time.Second, "the relays' MaxBackoff")
	fs.DurationVar(&o.relay.publishTimeout, "publish-timeout", 300*time.Millisecond, "the relays' PublishTimeout: a publish to a stopped broker hangs this long")
	fs.DurationVar(&o.relay.lease, "lease", 3*time.Second, "the relays' LeaseDuration (at least 3 PublishTimeouts): it bounds a batch, and so how often a relay retries during an outage")
	fs.DurationVar(&o.host.longTx, "long-tx", 0, "a writer keeps one transaction open this long (at most 2/5 of -duration), writing ten new accounts with ten events each every 100ms (0: none)")
	fs.DurationVar(&o.host.holdEvery, "hold-every", 0, "about how often a reader holds the outbox as pg_dump does (PostgreSQL: ACCESS SHARE lock; MySQL: a consistent snapshot; SQLite: a read transaction) (0: never)")
	fs.DurationVar(&o.host.holdFor, "hold-for", 2*time.Second, "how long the reader holds the outbox")
	fs.DurationVar(&o.host.operator, "operator-every", 0, "an operator requeues (all, by type, by id) or purges dead events through the admin API this often, during the first 2/5 of the run (requeued poisoned events then have time to die again) (0: never)")
	fs.DurationVar(&o.host.pauseEvery, "pause-every", 0, "about how often a relay process is stopped (SIGSTOP) for 1.5 leases and then resumed (0: never)")
	fs.IntVar(&o.host.relayPool, "relay-pool", 0, "the relays' connection pool size (MaxOpenConns; 0: unlimited, SQLite 1)")
	fs.BoolVar(&o.host.partitions, "partitions", false, "PostgreSQL: relays keep published events 3s and drop whole partitions of 2s ranges (DropPartitions), maintained every second")
	fs.DurationVar(&o.host.slowSave, "slow-save", time.Second, "a writer's save slower than this counts as held back")
	fs.BoolVar(&o.host.judgedSaves, "judge-saves", false, "fail the run when a writer's save is slower than -slow-save")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.db, o.dbServer, err = parseDB(*dbFlag); err != nil {
		return o, err
	}
	if o.host.partitions && o.db != postgresDB {
		return o, errors.New("-partitions: PostgreSQL only")
	}
	if o.poll == 0 {
		o.poll = dialects[o.db].poll
	}
	if o.writeRate < 0 {
		o.writeRate = dialects[o.db].writeRate
	}
	if err := o.relay.config().Validate(); err != nil {
		return o, err
	}
	horizon := o.relay.config().RetryHorizon()
	if o.refuseFor == 0 {
		o.refuseFor = horizon * 2 / 5
	}
	// A refused event's MaxAttempts-th failure comes at least half the retry
	// horizon after its first (jitter): a shorter window can kill nothing.
	if o.refuseFor >= horizon/2 {
		return o, fmt.Errorf("-refuse-for %v must be under half the retry horizon (%v): longer, a refused topic's events die as they should", o.refuseFor, horizon/2)
	}
	return o, nil
}

func orchestrate(args []string) (bool, error) {
	o, err := parseOptions(args)
	if err != nil {
		return false, err
	}
	ctx := context.Background()

	// A private broker and a schema of our own: nothing shared is touched.
	tmp, err := os.MkdirTemp("", "herald-chaos-")
	if err != nil {
		return false, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := os.MkdirAll(filepath.Join(tmp, "nats"), 0o700); err != nil {
		return false, err
	}
	srv, err := brokertest.NewNATSServer(filepath.Join(tmp, "nats"))
	if err != nil {
		return false, err
	}
	if err := srv.Start(); err != nil {
		return false, err
	}
	defer srv.Stop()
	dbase, err := setup(o.db, o.dbServer, tmp)
	if err != nil {
		return false, err
	}
	defer dbase.drop()
	dl := dbase.dialect()
	e := env{kind: dbase.kind, dsn: dbase.childDSN, nats: srv.URL(), poll: o.poll,
		topics: []string{"chaos_events", "chaos_events_b"}, refuseFile: filepath.Join(tmp, "refusals"), relay: o.relay}

	db, err := openDB(dbase.kind, dbase.dsn, "chaos_writer")
	if err != nil {
		return false, err
	}
	defer closeDB(db)
	// The ledger's own handle (no hook), and a relay that is never run, for
	// its Stats and Dead.
	q, err := openDB(dbase.kind, dbase.dsn, "chaos_ledger")
	if err != nil {
		return false, err
	}
	defer closeDB(q)
	mon, err := relay.New(q, nopPublisher{}, relay.Config{Logger: quiet()})
	if err != nil {
		return false, err
	}
	// Each account's events go to one of two topics (the order check is per
	// account, within one stream); the relays refuse the second in the
	// refusal windows.
	topic := func(env *events.Envelope) string {
		id, _ := uuid.Parse(env.AggregateID)
		return e.topics[int(id[15])%len(e.topics)]
	}
	// PostgreSQL wakes the relays in their processes with a NOTIFY; the
	// other databases cannot (relay.ErrNoNotify), and their relays poll.
	var notifier *relay.Notifier
	hcfg := outboxhook.Config{Topic: topic}
	switch notifier, err = relay.NewNotifier(db, relay.NotifierConfig{Channel: "chaos"}); {
	case err == nil:
		hcfg.Notify = notifier.Notify
	case !errors.Is(err, relay.ErrNoNotify):
		return false, err
	}
	if o.host.partitions {
		// The outbox partitioned, before the hook would make it plain.
		r, err := relay.New(db, nopPublisher{}, partitionedConfig(relay.Config{Logger: quiet()}))
		if err != nil {
			return false, err
		}
		if err := r.Setup(ctx); err != nil {
			return false, err
		}
	}
	if err := db.Use(outboxhook.New(hcfg)); err != nil {
		return false, err
	}
	if err := migrateModels(ctx, db, dl); err != nil {
		return false, err
	}
	// The relays' tables (ordered mode), before three relays race to make them.
	if _, err := migrations.Migrate(ctx, db); err != nil {
		return false, err
	}
	if _, err := inbox.New(db, inbox.Config{}); err != nil {
		return false, err
	}
	accs := make([]*Account, o.accounts)
	for i := range accs {
		accs[i] = &Account{ID: uuid.New()}
		if err := db.Create(accs[i]).Error; err != nil {
			return false, err
		}
	}

	// The observer reads the streams in order, as the broker stored them.
	obs := &observer{seen: map[string]int{}}
	ocfg := brokertest.NATSSubscriberConfig(e.nats, "chaos_observer")
	ocfg.JetStream.AckAsync = true // one subscriber per stream, in stream order; do not wait on each ack
	obsSub, err := wmnats.NewSubscriber(ocfg, watermill.NopLogger{})
	if err != nil {
		return false, err
	}
	runCtx, stopAll := context.WithCancel(ctx)
	var bg sync.WaitGroup // the observer, the notifier and the fault loops
	defer bg.Wait()
	defer stopAll()
	defer obsSub.Close() //nolint:errcheck // closes the observer's channels
	for _, t := range e.topics {
		msgs, err := obsSub.Subscribe(runCtx, t)
		if err != nil {
			return false, err
		}
		bg.Go(func() { obs.run(msgs) })
	}
	if notifier != nil {
		bg.Go(func() { _ = notifier.Run(runCtx) })
	}

	// Children, each restarted by its supervisor.
	var (
		children []*child
		restarts atomic.Int64
		wg       sync.WaitGroup
		stopping atomic.Bool
	)
	self, err := os.Executable()
	if err != nil {
		return false, err
	}
	for _, c := range []*child{{role: "relay", id: "1"}, {role: "relay", id: "2"}, {role: "relay", id: "3"},
		{role: "consumer", id: "1"}, {role: "consumer", id: "2"}} {
		children = append(children, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := true; !stopping.Load(); first = false {
				if !first {
					restarts.Add(1)
					time.Sleep(200 * time.Millisecond)
				}
				cmd := exec.Command(self, c.role)
				ce := e
				ce.id = c.id
				cmd.Env = append(os.Environ(), append(ce.vars(), fmt.Sprintf("CHAOS_CRASH_ONE_IN=%d", o.crashOneIn), fmt.Sprintf("CHAOS_UNORDERED=%t", o.unordered),
					fmt.Sprintf("CHAOS_RELAY_POOL=%d", o.host.relayPool), fmt.Sprintf("CHAOS_PARTITIONS=%t", o.host.partitions))...)
				cmd.Stderr = os.Stderr
				c.mu.Lock()
				if stopping.Load() || cmd.Start() != nil {
					c.mu.Unlock()
					return
				}
				c.cmd = cmd
				c.mu.Unlock()
				_ = cmd.Wait()
			}
		}()
	}
	defer func() {
		stopping.Store(true)
		for _, c := range children {
			c.mu.Lock()
			if c.cmd != nil && c.cmd.Process != nil {
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
			}
			c.mu.Unlock()
		}
		wg.Wait()
	}()

	led := newLedger()
	f := &faults{db: db, q: q, mon: mon, srv: srv, led: led, env: e,
		outageLen: o.outageLen, refuseFor: o.refuseFor, burstAccounts: o.burstAccounts, burstEvents: o.burstEvents}

	// Writers.
	writeCtx, stopWriting := context.WithTimeout(ctx, o.dur)
	defer stopWriting()
	saves := &saveStats{}
	// The host's faults.
	h := &host{o: o.host, kind: dbase.kind, db: db, q: q, led: led}
	if dbase.kind == sqliteDB {
		// The long transaction holds SQLite's one write lock: every save
		// waits for it, by SQLite's design, not Herald's.
		saves.skip = h.overlapsLong
	}
	for _, c := range children {
		if c.role == "relay" {
			h.relays = append(h.relays, c)
		}
	}
	if o.host.operator > 0 {
		if h.adm, err = admin.Open(ctx, q, admin.Config{Channel: "chaos"}); err != nil {
			return false, err
		}
	}
	var ww sync.WaitGroup
	for w := range o.writers {
		mine := accs[w*len(accs)/o.writers : (w+1)*len(accs)/o.writers]
		ww.Go(func() { writer(writeCtx, db, mine, led, f, saves, o) })
	}

	opCtx, stopOperator := context.WithTimeout(writeCtx, o.dur*2/5)
	defer stopOperator()
	// The long transaction begins after the sessions are cut (2/5 of the run).
	ww.Go(func() {
		h.o.longTx = min(h.o.longTx, o.dur*2/5)
		h.longTransaction(writeCtx, o.dur*9/20)
	})
	bg.Go(func() { h.holdLoop(writeCtx) })
	bg.Go(func() { h.operatorLoop(opCtx) })
	bg.Go(func() { h.pauseLoop(writeCtx, o.relay.lease) })

	// Faults.
	var kills, terminated atomic.Int64
	start := time.Now()
	if o.refuseEvery > 0 {
		bg.Go(func() { f.refusalLoop(writeCtx, o.refuseEvery) })
	}
	bg.Go(func() { f.poisonLoop(writeCtx, o.poison, o.dur/time.Duration(o.outages+2)) })
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		nextOutage := 0
		terminatedOnce := false
		lastKill := time.Now()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-writeCtx.Done():
				return
			case <-tick.C:
			}
			elapsed := time.Since(start)
			if time.Since(lastKill) >= o.killEvery {
				lastKill = time.Now()
				if c := children[rand.IntN(len(children))]; c.kill() {
					kills.Add(1)
				}
			}
			if !terminatedOnce && elapsed > o.dur*2/5 && dbase.cut != nil {
				terminatedOnce = true
				n, err := dbase.cut()
				if err != nil {
					fmt.Fprintln(os.Stderr, "chaos: cut the sessions:", err)
				}
				terminated.Store(n)
			}
			if nextOutage < o.outages && elapsed > o.dur*time.Duration(nextOutage+1)/time.Duration(o.outages+2) &&
				elapsed+o.outageLen < o.dur {
				nextOutage++
				f.outage()
			}
		}
	}()
	progressDone := make(chan struct{})
	go func() { // progress, every 5s, to stderr
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-t.C:
			}
			st, _ := mon.Stats(ctx)
			applied := countApplied(q)
			pending, dead := st.Pending, st.Dead
			c, _ := led.counts()
			obs.mu.Lock()
			seen := len(obs.order)
			obs.mu.Unlock()
			fmt.Fprintf(os.Stderr, "chaos: %4.0fs committed %d, outbox pending %d, dead %d, in the streams %d, applied %d, kills %d\n",
				time.Since(start).Seconds(), c, pending, dead, seen, applied, kills.Load())
		}
	}()
	defer close(progressDone)
	ww.Wait()
	<-faultsDone
	faultsStopped := time.Now()

	// Drain: everything committed and not poisoned published and applied,
	// the poisoned dead, within 30s.
	committed, poisoned := led.counts()
	want := committed - poisoned
	drained := false
	for time.Since(faultsStopped) < 30*time.Second {
		st, err := mon.Stats(ctx)
		applied := countApplied(q)
		if err == nil && st.Pending == 0 && applied >= int64(want) {
			drained = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	drainTime := time.Since(faultsStopped)
	time.Sleep(time.Second) // late redeliveries
	// The observer reads the streams one message at a time: let it finish,
	// or stop making progress.
	for last, still := -1, 0; still < 50; time.Sleep(100 * time.Millisecond) {
		obs.mu.Lock()
		n := len(obs.order)
		obs.mu.Unlock()
		if n >= want {
			break
		}
		if n == last {
			still++
		} else {
			last, still = n, 0
		}
	}

	v, err := judge(q, dl, mon, led, obs, h.purged.Load())
	if err != nil {
		return false, err
	}
	mode, unorderedViolations := "ordered", 0
	if o.unordered {
		// Unordered mode promises no order: shown, not judged.
		mode, unorderedViolations, v.violations = "unordered", v.violations, 0
	}
	ok := v.ok() && drained && h.savesOK(saves)
	fmt.Printf("\nHerald chaos run: %v of faults, 3 %s relays, 2 consumers behind the inbox, NATS JetStream, %s\n\n", o.dur, mode, dbase.kind)
	fmt.Println("| measure | value |")
	fmt.Println("|---|---:|")
	row := func(k string, val any) { fmt.Printf("| %s | %v |\n", k, val) }
	row("database", describeKind(dbase, o.poll))
	pace := "as fast as they go"
	if o.writeRate > 0 {
		pace = fmt.Sprintf("at most %d transactions/s together", o.writeRate)
	}
	row("writers", fmt.Sprintf("%d, %s", o.writers, pace))
	row("events committed", committed)
	row("events rolled back (must never be seen)", len(led.rolledBack))
	row("writer errors (outcome unknown, not counted)", led.writeErrs)
	row("kills (SIGKILL by the orchestrator)", kills.Load())
	row("process restarts (kills, crashes between ack and mark)", restarts.Load())
	row("relay retries: MaxAttempts, backoff (retry horizon)", fmt.Sprintf("%d, %v..%v (%v)", o.relay.maxAttempts,
		o.relay.minBackoff, o.relay.maxBackoff, o.relay.config().RetryHorizon()))
	row("broker outages, each stopped amid a burst", fmt.Sprintf("%d × %v (burst of %d at the stop: %s)", f.outages.Load(), o.outageLen,
		o.burstAccounts*o.burstEvents, strings.Join(f.burstStats, "; ")))
	row("refusal windows of one topic, light traffic on the other", fmt.Sprintf("%d × %v (refused events waiting at their ends: %d)",
		f.refusalsN.Load(), o.refuseFor, f.refusedWaiting.Load()))
	if dbase.cut != nil {
		row(dbase.cutLabel, terminated.Load())
	} else {
		row(dbase.cutLabel, dbase.cutNA)
	}
	lat := obs.latencies(led, f.firstOutage(), 0.5, 0.9, 0.99)
	row("commit to stream before the first outage, p50 / p90 / p99", fmt.Sprintf("%v / %v / %v",
		lat[0].Round(time.Millisecond), lat[1].Round(time.Millisecond), lat[2].Round(time.Millisecond)))
	row("duplicate deliveries in the streams (allowed)", v.dupDeliveries)
	row("duplicate effects", v.dupEffects)
	row("lost", v.lost)
	row("ghost events (rolled back, yet seen)", v.ghosts)
	if o.unordered {
		row("order violations (unordered mode: not promised)", unorderedViolations)
	} else {
		row("order violations", v.violations)
	}
	row("poisoned events (refused for ever)", fmt.Sprintf("%d (+%d of unknown outcome)", poisoned, len(led.poisonUnknown)))
	row("dead events (must be exactly the poisoned)", fmt.Sprintf("%d: %d not poisoned, %d poisoned not dead, %d poisoned yet seen",
		v.dead, v.deadUnpoisoned, v.poisonAlive, v.poisonSeen))
	if v.dead > 0 {
		row("dead events: longest from commit to death, most attempts", fmt.Sprintf("%.1fs, %d", v.slowestDeath, v.mostAttempts))
	}
	if v.purgedPoison != 0 {
		row("poisoned events purged by the operator", v.purgedPoison)
	}
	h.rows(row, saves)
	row("drain time after faults stopped", fmt.Sprintf("%.1fs (limit 30s, drained: %v)", drainTime.Seconds(), drained))
	if ok {
		inOrder := ", in order,"
		if o.unordered {
			inOrder = "" // not promised
		}
		fmt.Printf("\nPASS: every committed event's effect happened exactly once%s and nothing else was seen; only the poisoned died.\n", inOrder)
		fmt.Println("chaos: 1 passed, 0 failed")
	} else {
		fmt.Println("\nFAIL: see the table.")
		fmt.Println("chaos: 0 passed, 1 failed")
	}
	return ok, nil
}

// writer saves random accounts of mine, one event per transaction, 10% of
// them rolled back, a poisoned event when the faults owe one, slowly during
// a refusal window, until ctx is done; with a rate, the writers together
// begin at most rate transactions a second.
func writer(ctx context.Context, db *gorm.DB, mine []*Account, led *ledger, f *faults, saves *saveStats, o options) {
	rate, writers := o.writeRate, o.writers
	var (
		every time.Duration // this writer's share of the rate
		next  = time.Now()
	)
	if rate > 0 {
		every = time.Duration(float64(time.Second) * float64(writers) / float64(rate))
	}
	for ctx.Err() == nil {
		if every > 0 {
			next = next.Add(every)
			if wait := time.Until(next); wait > 0 {
				if !sleepCtx(ctx, wait) {
					return
				}
			} else if -wait > every {
				next = time.Now() // behind (a slow commit): no catching up in a rush
			}
		}
		i := rand.IntN(len(mine))
		a := mine[i]
		a.Version++
		poison := f.takePoison()
		ev := Deposited{AccountID: a.ID, Version: a.Version}
		if poison {
			a.RecordWithMetadata(ev, events.Metadata{poisonKey: "1"})
		} else {
			a.Record(ev)
		}
		// Only the event recorded now: earlier ones may still be pending
		// on the aggregate (committed in a transaction the hook did not
		// see end; the next save settles them).
		recs := a.Records()
		ids := []string{recs[len(recs)-1].ID.String()}
		rollback := !poison && rand.IntN(10) == 0
		began := time.Now()
		err := db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Save(a).Error; err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
		saves.add(began, time.Since(began), o.host.slowSave)
		if !led.record(ids, err, poison) {
			if poison {
				f.poisonDue.Add(1) // owed still
			}
			// Forget the in-memory aggregate: reload what committed.
			fresh := &Account{}
			if db.First(fresh, "id = ?", a.ID).Error == nil {
				mine[i] = fresh
			}
		}
		if f.slow.Load() {
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}
}

// verdict is the ledger's judgement of the run.
type verdict struct {
	lost, dupEffects, ghosts, violations, dupDeliveries int
	dead, deadUnpoisoned, poisonAlive, poisonSeen       int
	purgedPoison                                        int     // poisoned, dead, and purged by the operator
	slowestDeath                                        float64 // seconds from commit to death, at most
	mostAttempts                                        int     // of a dead event
}

func (v verdict) ok() bool {
	return v.lost == 0 && v.dupEffects == 0 && v.ghosts == 0 && v.violations == 0 &&
		v.deadUnpoisoned == 0 && v.poisonAlive == 0 && v.poisonSeen == 0 && v.purgedPoison >= 0
}

// judge compares the ledger with the effects, the streams and the dead events.
// A poisoned event that is no longer in the outbox was purged by the
// operator: no more of them than the operator purged (purged), else
// purgedPoison is -1.
func judge(q *gorm.DB, dl dialect, mon *relay.Relay, led *ledger, obs *observer, purged int64) (verdict, error) {
	var v verdict
	effects, err := countByID(q, `SELECT event_id, count(*) FROM effects GROUP BY event_id`)
	if err != nil {
		return v, err
	}
	deadEvs, err := mon.Dead(context.Background(), 1<<20)
	if err != nil {
		return v, fmt.Errorf("ledger: %w", err)
	}
	dead := map[string]int{}
	for _, d := range deadEvs {
		dead[d.ID.String()] = 1
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	for id := range led.committed {
		_, poisoned := led.poisoned[id]
		switch n := effects[id]; {
		case poisoned && (n > 0 || obs.sawID(id)):
			v.poisonSeen++
		case poisoned:
		case n == 0:
			v.lost++
		case n > 1:
			v.dupEffects++
		}
	}
	for id := range led.rolledBack {
		if effects[id] > 0 || obs.sawID(id) {
			v.ghosts++
		}
	}
	v.dead = len(dead)
	for id := range dead {
		_, p := led.poisoned[id]
		_, u := led.poisonUnknown[id]
		if !p && !u {
			v.deadUnpoisoned++
		}
	}
	for id := range led.poisoned {
		if dead[id] == 0 {
			var n int64
			if purged > 0 && q.Raw(`SELECT count(*) FROM outbox_messages WHERE id = ?`, id).Row().Scan(&n) == nil && n == 0 {
				v.purgedPoison++
				continue
			}
			v.poisonAlive++
			describe(q, dl, id)
		}
	}
	if int64(v.purgedPoison) > purged {
		v.purgedPoison = -1
	}
	_ = q.Raw(`SELECT coalesce(max(`+dl.secs("dead_at", "created_at")+`), 0), coalesce(max(attempts), 0)
		FROM outbox_messages WHERE dead_at IS NOT NULL`).Row().Scan(&v.slowestDeath, &v.mostAttempts)
	v.violations, v.dupDeliveries = obs.verdict()
	return v, nil
}

// describe prints what the outbox says of event id, to stderr.
func describe(q *gorm.DB, dl dialect, id string) {
	var (
		attempts, strikes, blocked int
		lastErr                    sql.NullString
		age, due                   float64
	)
	err := q.Raw(`SELECT o.attempts, o.strikes, o.last_error, `+dl.secs(dl.now, "o.created_at")+`,
		`+dl.secs("o.available_at", dl.now)+`,
		(SELECT count(*) FROM outbox_messages l WHERE l.aggregate_id = o.aggregate_id AND l.seq > o.seq
			AND l.processed_at IS NULL AND l.dead_at IS NULL)
		FROM outbox_messages o WHERE o.id = ?`, id).Row().Scan(&attempts, &strikes, &lastErr, &age, &due, &blocked)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: event %s: %v\n", id, err)
		return
	}
	fmt.Fprintf(os.Stderr, "chaos: event %s: %d attempts, %d strikes, last error %q, %.1fs old, due in %.1fs, %d later events of its aggregate wait\n",
		id, attempts, strikes, lastErr.String, age, due, blocked)
}

// countByID runs a query of (id, count) rows into a map.
func countByID(q *gorm.DB, query string) (map[string]int, error) {
	rows, err := q.Raw(query).Rows()
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			id string
			n  int
		)
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
		out[id] = n
	}
	return out, rows.Err()
}

// countApplied counts the events whose effect happened (-1 when unknown).
func countApplied(q *gorm.DB) int64 {
	var n int64
	if err := q.Raw(`SELECT count(DISTINCT event_id) FROM effects`).Row().Scan(&n); err != nil {
		return -1
	}
	return n
}

// nopPublisher is the publisher of the orchestrator's relay, which is never
// run: it only reads the outbox (Stats, Dead).
type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error {
	return errors.New("chaos: not a publishing relay")
}
func (nopPublisher) Close() error { return nil }

var errRollback = errors.New("chaos: deliberate rollback")

// observer reads the whole stream in order and keeps, per event, its first
// position, to check per-aggregate order and count duplicate deliveries.
type observer struct {
	mu    sync.Mutex
	seen  map[string]int // event id -> first position
	order []observed
	dups  int
}

type observed struct {
	id      string
	account string
	version int
	at      time.Time // when the observer first read it
}

func (o *observer) run(msgs <-chan *message.Message) {
	for m := range msgs {
		var d Deposited
		_ = json.Unmarshal(m.Payload, &d)
		o.mu.Lock()
		if _, ok := o.seen[m.UUID]; ok {
			o.dups++
		} else {
			o.seen[m.UUID] = len(o.order)
			o.order = append(o.order, observed{id: m.UUID, account: d.AccountID.String(), version: d.Version, at: time.Now()})
		}
		o.mu.Unlock()
		m.Ack()
	}
}

func (o *observer) sawID(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.seen[id]
	return ok
}

// verdict returns the order violations (an account's version first seen after
// a higher one of the same account) and the duplicate deliveries.
func (o *observer) verdict() (violations, dups int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	last := map[string]int{}
	for _, ob := range o.order {
		if v, ok := last[ob.account]; ok && ob.version < v {
			violations++
		}
		last[ob.account] = max(last[ob.account], ob.version)
	}
	return violations, o.dups
}

// latencies returns the quantiles qs of the time from an event's commit (as
// its writer saw it) to the observer's first read of it in the stream, over
// the events committed before `before` (zero: all).
func (o *observer) latencies(led *ledger, before time.Time, qs ...float64) []time.Duration {
	led.mu.Lock()
	defer led.mu.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	var ds []time.Duration
	for _, ob := range o.order {
		if t, ok := led.committed[ob.id]; ok && (before.IsZero() || t.Before(before)) {
			ds = append(ds, max(ob.at.Sub(t), 0))
		}
	}
	out := make([]time.Duration, len(qs))
	if len(ds) == 0 {
		return out
	}
	slices.Sort(ds)
	for i, q := range qs {
		out[i] = ds[min(int(q*float64(len(ds))), len(ds)-1)]
	}
	return out
}
