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

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/walrelay"
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
	// atRisk are the committed events that may have been committed between
	// a lost slot's last confirmed position and the new slot's start
	// (-drop-slot): lost events are allowed among them only.
	atRisk map[string]struct{}
	// sched are the committed events that were scheduled (schedule.go).
	sched map[string]*schedEvent
}

func newLedger() *ledger {
	return &ledger{committed: map[string]time.Time{}, rolledBack: map[string]struct{}{},
		poisoned: map[string]struct{}{}, poisonUnknown: map[string]struct{}{}, sched: map[string]*schedEvent{}}
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
		if l.writeErrs <= 3 {
			fmt.Fprintf(os.Stderr, "chaos: writer error (outcome unknown): %v\n", err)
		}
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
	broker                                            string        // the relays' publisher: nats or natsjs
	storage                                           string        // "table" or "wal" (outboxhook.StorageWAL and walrelay; PostgreSQL)
	host                                              hostOptions
	savepoints                                        bool // writers use raw savepoints, some through PrepareStmt
	dropSlot                                          bool // -storage wal: the slot is dropped once; the operator starts afresh
	fillStream                                        bool // -broker natsjs: the streams fill up (DiscardNew) for a while
	smallBatchLimit                                   int  // -broker kafka: the topics' max.message.bytes (0: kfake's default)
	scheduled                                         int  // scheduled events a second, the writers together (0: none)
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
	fs.StringVar(&o.broker, "broker", "nats", "the relays' publisher: nats (watermill-nats' JetStream publisher), natsjs (Herald's, publishers/natsjs: pipelined, a result per message) or kafka (Herald's, publishers/kafka, to an in-process kfake cluster; consumers read with watermill-kafka)")
	fs.StringVar(&o.storage, "storage", "table", "where the events are written: table (the outbox table) or wal (PostgreSQL's WAL, outboxhook.StorageWAL, published by walrelay from a slot, refused events parked in the table for the table relay the streaming walrelay runs; on a private server at wal_level=logical, which the run restarts once)")
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
	fs.DurationVar(&o.host.keep, "keep", 0, "the relays keep published events this long (relay.Config.Retention), so that an order violation's rows can still be described at the end (0: deleted when published; not with -partitions)")
	fs.DurationVar(&o.host.slowSave, "slow-save", time.Second, "a writer's save slower than this counts as held back")
	fs.BoolVar(&o.host.judgedSaves, "judge-saves", false, "fail the run when a writer's save is slower than -slow-save (SQLite: when a relay's or consumer's transaction held the write lock that long, frozen relays excepted; the saves are shown)")
	fs.BoolVar(&o.savepoints, "savepoints", false, "a third of the writers' transactions set a savepoint with raw SQL (tx.Exec) and roll back to it, in the spellings the database accepts (white space, case, comments, optional keywords, quoted names): SAVEPOINT, save, ROLLBACK TO, save again; or SAVEPOINT, save, ROLLBACK TO, commit (the events stay pending on the account, written by its next save, in a later transaction); or SAVEPOINT, save, RELEASE; or save, SAVEPOINT, ROLLBACK TO. Half the writers run them through a PrepareStmt session. Accounts still carrying undone events when the writers stop are saved once more")
	fs.BoolVar(&o.dropSlot, "drop-slot", false, "-storage wal: at 1/4 of the run the replication slot is dropped (pg_terminate_backend of its active pid, then pg_drop_replication_slot): every relay process must stop with walrelay.ErrSlot and none may make the slot again; the orchestrator, as the operator, then starts afresh (walrelay.RecreateSlot) and lets the relays run again. The events committed between the lost slot's last confirmed position and the new slot's start are listed as at risk: lost events are allowed only among them (a WAL event has no table row: its slot gone, it is gone)")
	fs.BoolVar(&o.fillStream, "fill-stream", false, "-broker natsjs: at 1/2 of the run both streams are made full for 4s (MaxMsgs 100 over what they hold, DiscardNew) under a burst of events, then given room again: JetStream refuses publishes with 'maximum messages exceeded', which is the broker's condition, not the messages': nothing may die")
	fs.IntVar(&o.smallBatchLimit, "small-batch-limit", 0, "-broker kafka: the topics' max.message.bytes, in bytes: below a batch of the writers' events but above one event (e.g. 2000), so that the broker refuses batches as too large; publishers/kafka must split them, and refuse a record only when it is refused alone: nothing may die but the poisoned (0: kfake's default, 1MB)")
	fs.IntVar(&o.scheduled, "scheduled", 20, "scheduled events a second the writers write, together (due 0.2-3s after the save; half under a key; in ordered mode 2 in 5 apart from their account's order), which other goroutines cancel or move (by id or key, half at the due time, racing the relays) in transactions that change a reminder row too, 1 in 5 rolled back; none with -storage wal, which has no scheduled events (0: none)")
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
	switch o.storage {
	case "table":
	case "wal":
		if o.db != postgresDB || o.dbServer != "" || o.host.partitions {
			return o, errors.New("-storage wal: -db postgres only (the run starts its own server at wal_level=logical), without -partitions")
		}
	default:
		return o, fmt.Errorf("-storage %q: table or wal", o.storage)
	}
	if o.storage == "wal" {
		o.scheduled = 0 // outboxhook.ErrScheduledWAL
	}
	if o.scheduled < 0 {
		return o, errors.New("-scheduled: events a second, 0 for none")
	}
	if o.dropSlot && o.storage != "wal" {
		return o, errors.New("-drop-slot: -storage wal only")
	}
	if o.fillStream && o.broker != "natsjs" {
		return o, errors.New("-fill-stream: -broker natsjs only (Herald's JetStream publisher, which takes a full stream for an outage)")
	}
	if o.smallBatchLimit != 0 && (o.broker != "kafka" || o.smallBatchLimit < 0) {
		return o, errors.New("-small-batch-limit: -broker kafka only, a number of bytes")
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
	lockDir = tmp
	var walServer *pgtest.PrivateServer // -storage wal: the run's own, at wal_level=logical
	if o.storage == "wal" {
		if walServer, err = pgtest.StartServer(logicaltest.Settings...); err != nil {
			return false, err
		}
		defer func() { _ = walServer.Stop("immediate") }()
		o.dbServer = walServer.DSN
	}
	topics := []string{"chaos_events", "chaos_events_b"}
	if o.broker == "amqp" { // the shared RabbitMQ: names of the run's own
		sfx := "_" + uuid.NewString()[:8]
		topics = []string{topics[0] + sfx, topics[1] + sfx}
	}
	brk, err := startBroker(o.broker, tmp, topics)
	if err != nil {
		return false, err
	}
	defer brk.Close()
	if o.smallBatchLimit > 0 {
		if err := brk.(*kafkaBroker).setLimit(topics, o.smallBatchLimit); err != nil {
			return false, err
		}
	}
	dbase, err := setup(o.db, o.dbServer, tmp)
	if err != nil {
		return false, err
	}
	defer dbase.drop()
	dl := dbase.dialect()
	e := env{kind: dbase.kind, dsn: dbase.childDSN, nats: brk.URL(), poll: o.poll,
		topics: topics, refuseFile: filepath.Join(tmp, "refusals"), relay: o.relay}

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
	if o.storage == "wal" {
		hcfg.Storage = outboxhook.StorageWAL
	}
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
	if o.storage == "wal" {
		// The slot before the first event: it keeps only what comes after.
		if err := walrelay.Setup(ctx, dbase.childDSN, walConfig(!o.unordered)); err != nil {
			return false, err
		}
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
	obsSub, err := newSubscriber(brokerKind(o.broker), e.nats, "observer", 1)
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
	var sf *slotFault // -drop-slot
	if o.dropSlot {
		sf = &slotFault{q: q, dsn: dbase.childDSN, ordered: !o.unordered}
	}
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
					fmt.Sprintf("CHAOS_RELAY_POOL=%d", o.host.relayPool), fmt.Sprintf("CHAOS_PARTITIONS=%t", o.host.partitions), "CHAOS_KEEP="+o.host.keep.String(),
					"CHAOS_BROKER="+o.broker, "CHAOS_STORAGE="+o.storage)...)
				cmd.Stderr = os.Stderr
				c.mu.Lock()
				if stopping.Load() || cmd.Start() != nil {
					c.mu.Unlock()
					return
				}
				c.cmd = cmd
				c.mu.Unlock()
				_ = cmd.Wait()
				if sf != nil && c.role == "relay" {
					sf.exited(cmd, &stopping)
				}
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
	f := &faults{db: db, q: q, mon: mon, brk: brk, led: led, env: e,
		outageLen: o.outageLen, refuseFor: o.refuseFor, burstAccounts: o.burstAccounts, burstEvents: o.burstEvents}
	if o.scheduled > 0 {
		f.sched = newScheduler(db, led, o.scheduled, !o.unordered)
	}

	// Writers.
	writeCtx, stopWriting := context.WithTimeout(ctx, o.dur)
	defer stopWriting()
	saves := &saveStats{}
	spst := &spStats{}
	// The host's faults.
	h := &host{o: o.host, kind: dbase.kind, db: db, q: q, led: led}
	if dbase.kind == sqliteDB {
		// The long transaction, and the outages' bursts (3,000 events in
		// one transaction of the application's), hold SQLite's one write
		// lock: every save waits for them, by SQLite's design, not Herald's.
		saves.skip = func(began, ended time.Time) bool {
			return h.overlapsLong(began, ended) || f.bursts.overlaps(began, ended)
		}
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
		ww.Go(func() { writer(writeCtx, db, w, mine, led, f, saves, spst, o) })
	}

	// The writers schedule events until schedTail before they stop.
	schedCtx, stopScheduling := context.WithTimeout(writeCtx, max(o.dur-schedTail, o.dur/2))
	defer stopScheduling()
	bg.Go(func() { f.sched.run(schedCtx) })

	opCtx, stopOperator := context.WithTimeout(writeCtx, o.dur*2/5)
	defer stopOperator()
	// The long transaction begins after the sessions are cut (2/5 of the run).
	ww.Go(func() {
		h.o.longTx = min(h.o.longTx, o.dur*2/5)
		h.longTransaction(writeCtx, o.dur*9/20)
	})
	bg.Go(func() { h.holdLoop(writeCtx) })
	bg.Go(func() { h.waitLoop(writeCtx) })
	bg.Go(func() { h.operatorLoop(opCtx) })
	bg.Go(func() { h.pauseLoop(writeCtx, o.relay.lease) })

	// Faults.
	var kills, terminated atomic.Int64
	start := time.Now()
	if o.refuseEvery > 0 {
		bg.Go(func() { f.refusalLoop(writeCtx, o.refuseEvery) })
	}
	bg.Go(func() { f.poisonLoop(writeCtx, o.poison, o.dur/time.Duration(o.outages+2)) })
	if o.fillStream {
		bg.Go(func() {
			if outbound.Sleep(writeCtx, o.dur/2) {
				f.fillStreams()
			}
		})
	}
	if sf != nil {
		bg.Go(func() { sf.sample(writeCtx) })
		bg.Go(func() {
			if outbound.Sleep(writeCtx, o.dur/4) {
				sf.run(ctx, 3)
			}
		})
	}
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		nextOutage := 0
		terminatedOnce, restarted := false, false
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
			if walServer != nil && !restarted && elapsed > o.dur*3/5 {
				restarted = true
				if err := walServer.Restart(); err != nil {
					fmt.Fprintln(os.Stderr, "chaos: restart the database:", err)
				} else {
					fmt.Fprintln(os.Stderr, "chaos: database restarted")
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
			sc, cancelled := led.schedCounts()
			obs.mu.Lock()
			seen := len(obs.order)
			obs.mu.Unlock()
			fmt.Fprintf(os.Stderr, "chaos: %4.0fs committed %d (scheduled %d, cancelled %d), outbox pending %d, dead %d, in the streams %d, applied %d, kills %d\n",
				time.Since(start).Seconds(), c, sc, cancelled, pending, dead, seen, applied, kills.Load())
		}
	}()
	defer close(progressDone)
	ww.Wait()
	f.sched.wait() // the last cancels and moves
	<-faultsDone
	faultsStopped := time.Now()
	var riskFrom, riskTo time.Time
	if sf != nil {
		// The operator started afresh at 1/4 of the run: the events at
		// risk are known (a poisoned one among them may be lost: it
		// cannot die, and is not waited for below).
		riskFrom, riskTo = sf.markAtRisk(led, start)
	}

	// A poisoned event dies of strikes, failures that later publishes of its
	// batch confirm; with the writers stopped nothing confirms them (the
	// relay's doc: such a failure is retried every MaxBackoff, for ever),
	// and a poisoned event the operator requeued late, behind pauses and
	// one-connection pools, may not have died yet. Light traffic goes on
	// until every poisoned event is dead (or purged), for at most 30s: a
	// writer's saves, and every 100ms three new accounts with two events
	// each. Those give an ordered batch a second layer, a publish call after
	// its first layer's, which confirms a failure there (one event per
	// aggregate, as the saves mostly give, is one call to a batch
	// publisher, which confirms nothing: the poisoned took 12-21 s to die).
	confirming := time.Duration(0)
	if _, poisoned := led.counts(); poisoned > 0 {
		tctx, stop := context.WithCancel(ctx)
		var tw sync.WaitGroup
		light := o
		light.writeRate, light.writers, light.savepoints = 20, 1, false
		tw.Go(func() { writer(tctx, db, 0, accs, led, &faults{}, saves, spst, light) })
		tw.Go(func() {
			lf := &faults{db: db, led: led, burstAccounts: 3, burstEvents: 2}
			for outbound.Sleep(tctx, 100*time.Millisecond) {
				if _, err := lf.burst(); err != nil && tctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "chaos: light traffic:", err)
				}
			}
		})
		for time.Since(faultsStopped) < 30*time.Second && !poisonSettled(ctx, q, led, h.purged.Load()) {
			time.Sleep(200 * time.Millisecond)
		}
		stop()
		tw.Wait()
		confirming = time.Since(faultsStopped)
	}
	if o.savepoints {
		// Events a ROLLBACK TO left pending on accounts not saved since.
		flushCarried(db, accs, led, spst)
	}
	lastWrite := time.Now()

	// Drain: everything committed and not poisoned published and applied,
	// the poisoned dead, within 30s of the last write.
	committed, poisoned := led.counts()
	_, cancelled := led.schedCounts()
	want := committed - poisoned - cancelled
	drained := false
	for time.Since(lastWrite) < 30*time.Second {
		st, err := mon.Stats(ctx)
		applied := countApplied(q) + unappliedAtRisk(q, led) // the lost are allowed among them
		if err == nil && st.Pending == 0 && applied >= int64(want) {
			drained = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	drainTime := time.Since(lastWrite)
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

	st, err := brk.ReadBack(ctx, e.topics)
	if err != nil {
		return false, err
	}
	v, err := judge(q, dl, led, obs, st, h.purged.Load(), f.sched != nil, !o.unordered)
	if err != nil {
		return false, err
	}
	if v.lost > 0 {
		brk.Debug(e.topics)
	}
	mode, unorderedViolations := "ordered", 0
	if o.unordered {
		// Unordered mode promises no order: shown, not judged.
		mode, unorderedViolations, v.violations = "unordered", v.violations, 0
	}
	h.settleSaves(saves)
	ok := v.ok() && (f.sched == nil || v.sched.ok()) && drained && h.savesOK(saves) && h.deathsOK() && (sf == nil || sf.ok()) && (!o.fillStream || f.filled)
	kb, _ := brk.(*kafkaBroker)
	if o.smallBatchLimit > 0 {
		// The fault must have been felt, and a lone event must fit.
		ok = ok && kb.overLimit.Load() > 0 && kb.largestLone.Load() <= int64(o.smallBatchLimit)
	}
	brokerName := "NATS JetStream"
	switch brokerKind(o.broker) {
	case "kafka":
		brokerName = "Kafka (kfake, in-process; consumers: watermill-kafka)"
	case "amqp":
		brokerName = "RabbitMQ (behind a proxy that cuts it off; consumers: watermill-amqp)"
	}
	h.explainSlow(saves)
	fmt.Printf("\nHerald chaos run: %v of faults, 3 %s relays, 2 consumers behind the inbox, %s (publisher %s), %s\n\n", o.dur, mode, brokerName, o.broker, dbase.kind)
	fmt.Println("| measure | value |")
	fmt.Println("|---|---:|")
	row := func(k string, val any) { fmt.Printf("| %s | %v |\n", k, val) }
	row("database", describeKind(dbase, o.poll))
	if walServer != nil {
		row("storage", "PostgreSQL's WAL (outboxhook.StorageWAL) on the run's own server at wal_level=logical, restarted once at 3/5 of the run; "+
			"walrelay in each relay process (one streams the slot, the others wait to take over), refused events parked in the table for the table relay the streaming one runs")
	}
	pace := "as fast as they go"
	if o.writeRate > 0 {
		pace = fmt.Sprintf("at most %d transactions/s together", o.writeRate)
	}
	row("writers", fmt.Sprintf("%d, %s", o.writers, pace))
	if o.savepoints {
		row("raw savepoints (-savepoints), transactions committed: resaved after ROLLBACK TO, left pending by one, released, rolled back to after the save",
			fmt.Sprintf("%d, %d, %d, %d (through PrepareStmt: %d)", spst.shapes[spResave].Load(), spst.shapes[spCarry].Load(),
				spst.shapes[spKept].Load(), spst.shapes[spAfter].Load(), spst.prepared.Load()))
		row("events a ROLLBACK TO left pending, committed by a later save (accounts saved once more at the end)",
			fmt.Sprintf("%d (%d)", spst.carriedIn.Load(), spst.flushed.Load()))
	}
	row("events committed", committed)
	if f.sched != nil {
		f.sched.rows(row, v.sched)
	} else if o.storage == "wal" {
		row("scheduled events", "none: the WAL outbox has none (outboxhook.ErrScheduledWAL)")
	}
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
	row("duplicates stored in the streams, redelivered to the observer (allowed)", fmt.Sprintf("%d, %d", v.dupStored, v.dupDeliveries))
	row("duplicate effects", v.dupEffects)
	row("lost", v.lost)
	row("ghost events (rolled back, yet seen)", v.ghosts)
	if o.unordered {
		row("order violations (unordered mode: not promised)", unorderedViolations)
	} else {
		row("order violations (in the streams)", v.violations)
	}
	row("events the observer read after a later one of their account (redelivered after an outage; allowed)", v.readOutOfOrder)
	row("poisoned events (refused for ever)", fmt.Sprintf("%d (+%d of unknown outcome)", poisoned, len(led.poisonUnknown)))
	row("dead events (must be exactly the poisoned)", fmt.Sprintf("%d: %d not poisoned, %d poisoned not dead, %d poisoned yet seen",
		v.dead, v.deadUnpoisoned, v.poisonAlive, v.poisonSeen))
	if v.dead > 0 {
		row("dead events: longest from commit (or last requeue) to death, most attempts", fmt.Sprintf("%.1fs, %d", v.slowestDeath, v.mostAttempts))
	}
	if v.purgedPoison != 0 {
		row("poisoned events purged by the operator", v.purgedPoison)
	}
	if sf != nil {
		sf.rows(row, v, start, riskFrom, riskTo)
	}
	if o.fillStream {
		row(fmt.Sprintf("streams full (-fill-stream: MaxMsgs %d over what they held, DiscardNew) for %v under a burst of %d, at 1/2 of the run; nothing may die",
			fillRoom, fillFor, o.burstAccounts*o.burstEvents), f.fillStat)
	}
	if o.smallBatchLimit > 0 {
		row(fmt.Sprintf("topics' max.message.bytes %d (-small-batch-limit): record batches produced, over the limit (refused as too large: must be > 0), largest batch of one record (must fit)",
			o.smallBatchLimit), fmt.Sprintf("%d, %d, %d bytes", kb.batches.Load(), kb.overLimit.Load(), kb.largestLone.Load()))
	}
	h.rows(row, saves)
	if confirming > 0 {
		row("light traffic after the faults, until the poisoned died (20 saves/s, 3 new accounts of 2 events every 100ms; at most 30s)", fmt.Sprintf("%.1fs", confirming.Seconds()))
	}
	row("drain time after the last write", fmt.Sprintf("%.1fs (limit 30s, drained: %v)", drainTime.Seconds(), drained))
	if ok {
		inOrder := ", in order,"
		if o.unordered {
			inOrder = "" // not promised
		}
		sched := ""
		if f.sched != nil {
			sched = " Every scheduled event not cancelled was published, none before its due time, none whose cancel committed."
		}
		fmt.Printf("\nPASS: every committed event's effect happened exactly once%s and nothing else was seen; only the poisoned died.%s\n", inOrder, sched)
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
//
// With -savepoints (spst), a third of its transactions set a savepoint with
// raw SQL and roll back to it (savepointTx); writers of odd number w run
// theirs through a PrepareStmt session.
func writer(ctx context.Context, db *gorm.DB, w int, mine []*Account, led *ledger, f *faults, saves *saveStats, spst *spStats, o options) {
	rate, writers := o.writeRate, o.writers
	tdb, sp := db, spellings(o.db)
	if o.savepoints && w%2 == 1 {
		tdb = db.Session(&gorm.Session{PrepareStmt: true})
	}
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
				if !outbound.Sleep(ctx, wait) {
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
		// -savepoints: a third of the transactions set one (never with a
		// poisoned event: its bookkeeping stays simple).
		shape := spNoSavepoint
		if o.savepoints && !poison && rand.IntN(3) == 0 {
			shape = spShape(1 + rand.IntN(4))
		}
		// A scheduled event, when one is due, in a transaction without a
		// savepoint (its due time is its save's).
		var sc *events.Schedule
		if !poison && shape == spNoSavepoint && f.sched.take() {
			p := f.sched.plan()
			sc = &p
		}
		ev := Deposited{AccountID: a.ID, Version: a.Version}
		switch {
		case poison:
			a.RecordWithMetadata(ev, events.Metadata{poisonKey: "1"})
		case sc != nil:
			a.Schedule(ev, *sc)
		default:
			a.Record(ev)
		}
		// Only the event recorded now: earlier ones may still be pending
		// on the aggregate (committed in a transaction the hook did not
		// see end; the next save settles them).
		recs := a.Records()
		ids := []string{recs[len(recs)-1].ID.String()}
		rollback := !poison && rand.IntN(10) == 0
		carried := a.carried
		began := time.Now()
		err := tdb.Transaction(func(tx *gorm.DB) error {
			if err := savepointTx(tx, a, shape, sp); err != nil {
				return err
			}
			if sc != nil {
				if err := tx.Create(&Reminder{EventID: ids[0], AccountID: a.ID.String(), ScheduleKey: sc.Key, State: "scheduled"}).Error; err != nil {
					return err
				}
			}
			if rollback {
				return errRollback
			}
			return nil
		})
		ended := time.Now()
		saves.add(began, ended.Sub(began), o.host.slowSave)
		if err == nil && shape == spCarry {
			// Committed, but the ROLLBACK TO undid the account's save: its
			// events, those it carried too, stay pending on it.
			a.carried = append(slices.Clone(carried), ids...)
			spst.shapes[shape].Add(1)
			if tdb != db {
				spst.prepared.Add(1)
			}
			continue
		}
		led.bookCarried(carried, err)
		a.carried = nil
		if err == nil {
			spst.carriedIn.Add(int64(len(carried)))
			if shape != spNoSavepoint {
				spst.shapes[shape].Add(1)
				if tdb != db {
					spst.prepared.Add(1)
				}
			}
		}
		committed := led.record(ids, err, poison)
		if committed && sc != nil {
			f.sched.committed(ids[0], a.ID.String(), a.Version, *sc, began, ended)
		}
		if !committed {
			if poison {
				f.poisonDue.Add(1) // owed still
			}
			// Forget the in-memory aggregate: reload what committed. It
			// still holds the events of the transaction that did not
			// commit, which its next save would write again (ghosts of a
			// rolled-back transaction): never save it again. Until the
			// reload succeeds (a database restart: -storage wal), or the
			// writer stops.
			fresh := &Account{}
			for db.First(fresh, "id = ?", a.ID).Error != nil {
				if !outbound.Sleep(ctx, 100*time.Millisecond) {
					return
				}
			}
			mine[i] = fresh
		}
		if f.slow.Load() {
			outbound.Sleep(ctx, 100*time.Millisecond)
		}
	}
}

// poisonSettled reports whether every poisoned event the ledger committed is
// dead, or may have been purged: no more of them alive than the operator
// purged dead events (purged). It only decides when the light traffic after
// the faults stops; judge decides the run.
func poisonSettled(ctx context.Context, q *gorm.DB, led *ledger, purged int64) bool {
	ops, err := admin.Open(ctx, q, admin.Config{})
	if err != nil {
		return false
	}
	deadEvs, err := ops.Dead(ctx, admin.DeadFilter{}, 1<<20)
	if err != nil {
		return false
	}
	dead := map[string]bool{}
	for _, d := range deadEvs {
		dead[d.ID] = true
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	var alive int64
	for id := range led.poisoned {
		if dead[id] {
			continue
		}
		if _, risk := led.atRisk[id]; risk && !inOutbox(q, id) {
			continue // lost with the dropped slot (-drop-slot): never parked, it cannot die
		}
		alive++ // parked too (at risk or not): it dies only while later publishes confirm its failures
	}
	return alive <= purged
}

// inOutbox reports whether event id has a row in the outbox table: with
// -storage wal, an event the WAL relay parked (true when it cannot tell).
func inOutbox(q *gorm.DB, id string) bool {
	var n int64
	if err := q.Raw(`SELECT count(*) FROM outbox_messages WHERE id = ?`, id).Row().Scan(&n); err != nil {
		return true
	}
	return n > 0
}

// verdict is the ledger's judgement of the run.
type verdict struct {
	lost, dupEffects, ghosts, violations, dupDeliveries int
	readOutOfOrder, dupStored                           int // by the live observer; in the streams
	dead, deadUnpoisoned, poisonAlive, poisonSeen       int
	purgedPoison                                        int     // poisoned, dead, and purged by the operator
	slowestDeath                                        float64 // seconds from commit (or the last requeue: it resets created_at) to death, at most
	mostAttempts                                        int     // of a dead event
	atRisk, lostAtRisk                                  int     // -drop-slot: committed events at risk, and those of them lost (allowed)
	sched                                               schedVerdict
}

func (v verdict) ok() bool {
	return v.lost == 0 && v.dupEffects == 0 && v.ghosts == 0 && v.violations == 0 &&
		v.deadUnpoisoned == 0 && v.poisonAlive == 0 && v.poisonSeen == 0 && v.purgedPoison >= 0
}

// judge compares the ledger with the effects, the streams and the dead events.
// A poisoned event that is no longer in the outbox was purged by the
// operator: no more of them than the operator purged (purged), else
// purgedPoison is -1. With scheduled events, it judges them too (the
// reminders, the relays' attempts); those whose cancel committed are not
// lost, and those apart from their account's order are not in it. Each
// order violation is explained (its events, their account's history) when
// ordered; an unordered run's are counted only.
func judge(q *gorm.DB, dl dialect, led *ledger, obs *observer, st stored, purged int64, scheduled, ordered bool) (verdict, error) {
	var v verdict
	effects, err := countByID(q, `SELECT event_id, count(*) FROM effects GROUP BY event_id`)
	if err != nil {
		return v, err
	}
	apart := led.apartIDs()
	var (
		rems map[string]Reminder
		atts map[string][]attempt
	)
	if scheduled {
		if rems, err = readReminders(q); err != nil {
			return v, err
		}
		atts = readAttempts(lockDir)
	}
	ops, err := admin.Open(context.Background(), q, admin.Config{})
	if err != nil {
		return v, fmt.Errorf("ledger: %w", err)
	}
	deadEvs, err := ops.Dead(context.Background(), admin.DeadFilter{}, 1<<20)
	if err != nil {
		return v, fmt.Errorf("ledger: %w", err)
	}
	dead := map[string]int{}
	lastErr := map[string]string{}
	for _, d := range deadEvs {
		dead[d.ID] = 1
		lastErr[d.ID] = fmt.Sprintf("attempts %d, strikes %d, last error %q", d.Attempts, d.Strikes, d.LastError)
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	var cancelled map[string]bool // scheduled, and their cancel committed
	if scheduled {
		v.sched, cancelled = led.judgeScheduled(rems, effects, obs, st, atts)
	}
	for id := range led.committed {
		if cancelled[id] {
			continue // judged by judgeScheduled
		}
		_, poisoned := led.poisoned[id]
		_, risk := led.atRisk[id]
		if risk {
			v.atRisk++
		}
		switch n := effects[id]; {
		case poisoned && (n > 0 || obs.sawID(id)):
			v.poisonSeen++
		case poisoned:
		case n == 0 && risk:
			v.lostAtRisk++
			if v.lostAtRisk <= 20 {
				fmt.Fprintf(os.Stderr, "chaos: lost at risk %s (in the streams: %v)\n", id, obs.sawID(id))
			}
		case n == 0:
			v.lost++
			if v.lost <= 10 { // the first few, with where they got to
				var inb int64
				_ = q.Raw(`SELECT count(*) FROM inbox_messages WHERE message_id = ?`, id).Row().Scan(&inb)
				fmt.Fprintf(os.Stderr, "chaos: lost %s (in the streams: %v, inbox rows: %d)\n", id, obs.sawID(id), inb)
			}
		case n > 1:
			v.dupEffects++
		}
	}
	for id := range led.rolledBack {
		if effects[id] > 0 || obs.sawID(id) {
			v.ghosts++
			fmt.Fprintf(os.Stderr, "chaos: ghost %s (effects %d, seen by the observer %v)\n", id, effects[id], obs.sawID(id))
		}
	}
	v.dead = len(dead)
	for id := range dead {
		_, p := led.poisoned[id]
		_, u := led.poisonUnknown[id]
		if !p && !u {
			v.deadUnpoisoned++
			fmt.Fprintf(os.Stderr, "chaos: dead, not poisoned: %s (%s)\n", id, lastErr[id])
		}
	}
	for id := range led.poisoned {
		if _, risk := led.atRisk[id]; risk && dead[id] == 0 && effects[id] == 0 && !obs.sawID(id) && !inOutbox(q, id) {
			v.lostAtRisk++ // lost with the slot: it cannot die
			continue
		}
		if dead[id] == 0 {
			if purged > 0 && !inOutbox(q, id) {
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
	v.readOutOfOrder, v.dupDeliveries = obs.verdict(apart)
	pairs := violationPairs(withoutApart(st.order, apart))
	v.violations, v.dupStored = len(pairs), st.dups
	for _, p := range pairs {
		if !ordered { // unordered mode promises no order: its pairs are counted, not explained
			break
		}
		fmt.Fprintf(os.Stderr, "chaos: order: account %s version %d (%s, at %s%s) stored after version %d (%s, at %s%s)\n",
			p[0].account, p[0].version, p[0].id, p[0].pos, led.schedNote(p[0].id), p[1].version, p[1].id, p[1].pos, led.schedNote(p[1].id))
		describe(q, dl, p[0].id)
		describe(q, dl, p[1].id)
		led.dumpAccount(p[0].account)
	}
	return v, nil
}

// describe prints what the outbox says of event id, to stderr.
func describe(q *gorm.DB, dl dialect, id string) {
	var (
		attempts, strikes, blocked int
		seq                        int64
		processed                  bool
		lastErr                    sql.NullString
		age, due                   float64
	)
	err := q.Raw(`SELECT o.seq, o.processed_at IS NOT NULL, o.attempts, o.strikes, o.last_error, `+dl.secs(dl.now, "o.created_at")+`,
		`+dl.secs("o.available_at", dl.now)+`,
		(SELECT count(*) FROM outbox_messages l WHERE l.aggregate_id = o.aggregate_id AND l.seq > o.seq
			AND l.processed_at IS NULL AND l.dead_at IS NULL)
		FROM outbox_messages o WHERE o.id = ?`, id).Row().Scan(&seq, &processed, &attempts, &strikes, &lastErr, &age, &due, &blocked)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: event %s: %v\n", id, err)
		return
	}
	fmt.Fprintf(os.Stderr, "chaos: event %s: outbox seq %d, published %v, %d attempts, %d strikes, last error %q, %.1fs old, due in %.1fs, %d later events of its aggregate wait\n",
		id, seq, processed, attempts, strikes, lastErr.String, age, due, blocked)
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
	due     time.Time // a scheduled event's due time, from its metadata (zero: none)
	pos     string    // where the broker stored it (read back), for the log
}

func (o *observer) run(msgs <-chan *message.Message) {
	for m := range msgs {
		var d Deposited
		_ = json.Unmarshal(m.Payload, &d)
		at := time.Now()
		due, _ := events.DueAt(m.Metadata)
		o.mu.Lock()
		if _, ok := o.seen[m.UUID]; ok {
			o.dups++
		} else {
			o.seen[m.UUID] = len(o.order)
			o.order = append(o.order, observed{id: m.UUID, account: d.AccountID.String(), version: d.Version, at: at, due: due})
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

// verdict returns the events the observer first read after a later version
// of their account (redeliveries after a broker outage; the order promised is
// the streams', see readStreams), the events of apart left out, and the
// duplicate deliveries.
func (o *observer) verdict(apart map[string]bool) (outOfOrder, dups int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return violations(withoutApart(o.order, apart)), o.dups
}

// latencies returns the quantiles qs of the time from an event's commit (as
// its writer saw it) to the observer's first read of it in the stream, over
// the events committed before `before` (zero: all), not scheduled.
func (o *observer) latencies(led *ledger, before time.Time, qs ...float64) []time.Duration {
	led.mu.Lock()
	defer led.mu.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	var ds []time.Duration
	for _, ob := range o.order {
		if _, sched := led.sched[ob.id]; sched {
			continue
		}
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

// debugConsumers prints the JetStream consumers' positions (what the broker
// counts as delivered and acked), to tell a lost event the broker never
// delivered from one it saw acked.
func debugConsumers(url string, streams []string) {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	for _, st := range streams {
		for c := range js.ConsumersInfo(st) {
			fmt.Fprintf(os.Stderr, "chaos: consumer %s/%s: delivered %+v ackfloor %+v pending %d ackpending %d redelivered %d maxdeliver %d ackwait %v\n",
				st, c.Name, c.Delivered, c.AckFloor, c.NumPending, c.NumAckPending, c.NumRedelivered, c.Config.MaxDeliver, c.Config.AckWait)
		}
	}
}
