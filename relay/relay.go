package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/relayhook"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/telemetry"
)

// ErrSchemaOutdated is returned (wrapped) by Setup and Run when the outbox or
// the relay's tables exist but lack a column, table or row that a migration
// makes (tables made by an earlier release); the message names the migration
// to run (migrations.Migrate applies it). It is outboxhook.ErrSchemaOutdated.
var ErrSchemaOutdated = store.ErrSchemaOutdated

// ErrSQLiteSettings is returned (wrapped) by New for an SQLite connection
// without a busy timeout, immediate transactions (_txlock=immediate) or WAL;
// the message names the DSN to open the file with. It is the same error as
// outboxhook.ErrSQLiteSettings, whose documentation says why each is needed.
var ErrSQLiteSettings = drivers.ErrSQLiteSettings

// Relay moves committed outbox rows to a Watermill publisher, at least once.
type Relay struct {
	cfg    Config
	table  ident.Table
	db     *sql.DB
	pub    message.Publisher
	drv    store.Driver     // the database's implementation
	caller *outbound.Caller // the publish calls to pub
	st     store.Relay      // the outbox table in it
	log    *slog.Logger
	wake   chan struct{}
	leases *leases // ordered mode only
	m      *metrics
	hooks  testHooks
	health health // this instance's evidence of outages, for the outage recovery

	failLog, deadLog *topicLimiter // log lines about failed and dead events, per topic

	partitioned atomic.Bool // DropPartitions, and the outbox is partitioned
}

// testHooks lets this package's tests put faults at exact points.
type testHooks struct {
	afterPublish func() error   // between the broker's ack and the mark; an error stands for a crash there
	point        relayhook.Hook // the points of a batch (the tests of any package: relayhook)
}

// at calls the test hook of point p, if there is one.
func (r *Relay) at(p relayhook.Point, err error) {
	if r.hooks.point != nil {
		r.hooks.point(p, err)
	}
}

// New returns a relay that reads the outbox through db and publishes to pub. It
// checks cfg (a bad config fails here) but does not touch the database: Run does,
// and keeps trying while the database is down. On SQLite, a local file, it asks a
// connection for the settings Herald needs, and fails with ErrSQLiteSettings
// without them. A Watermill publisher set up to return before the broker
// stored a message (watermill-amqp without Publish.ConfirmDelivery,
// watermill-nats on core NATS) is logged as a warning: the relay would mark
// events the broker may lose.
func New(db *gorm.DB, pub message.Publisher, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if db == nil || pub == nil {
		return nil, errors.New("relay: db and publisher are required")
	}
	conn, err := drivers.Open(db, cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if err := drivers.CheckSQLite(db); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	r := &Relay{
		cfg:    cfg,
		table:  conn.Table,
		db:     conn.DB,
		pub:    pub,
		drv:    conn.Driver,
		st:     conn.Driver.Relay(conn.Table),
		caller: outbound.NewCaller(pub, cfg.PublishTimeout, telemetry.Tracer(cfg.TracerProvider), cfg.MessagingSystem),
		log:    cfg.Logger.With("component", "herald.relay", "instance", cfg.InstanceID),
		wake:   make(chan struct{}, 1),
		m:      newMetrics(cfg.MeterProvider, cfg.Table),

		failLog: newTopicLimiter(30*time.Second, maxLogTopics),
		deadLog: newTopicLimiter(30*time.Second, maxLogTopics),
	}
	if cfg.Ordered {
		r.leases = newLeases(r)
	}
	if why := unsafePublisher(pub); why != "" {
		r.log.Warn("relay: the publisher may lose events the broker acknowledged", "why", why)
	}
	return r, nil
}

// Wake makes the relay look for events now. Call it after committing events in
// the relay's process (outboxhook.Config.Notify); it never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run relays until ctx is cancelled, then finishes or releases the batch in
// flight (within PublishTimeout) and returns nil. Database and broker faults never
// stop it: it logs them, backs off (capped exponential, with jitter) and resumes.
// An outdated schema does: Run returns ErrSchemaOutdated, naming the migration
// to run, before it claims anything.
func (r *Relay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	start := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	r.hooks.point = relayhook.From(ctx)
	defer r.observeOutbox()()
	if err := r.ensureSchema(ctx); err != nil {
		return err
	}
	caps := r.drv.Caps()
	if !r.cfg.DisableListen && caps.Has(store.Listen) {
		start(r.listen)
	}
	if r.cfg.Retention > 0 {
		start(r.cleaner)
	}
	if r.leases != nil {
		start(r.leases.run)
	} else {
		start(r.heartbeat)
	}
	if caps.Has(store.Position) {
		start(r.sweeper)
	}
	r.loop(ctx)
	wg.Wait()
	return nil
}

// ensureSchema creates the relay's tables and indexes when missing, retrying
// while the database is down. Without DDL rights they must exist already; an
// index it may not create only makes the relay slower, and is left out. An
// outdated schema (ErrSchemaOutdated) is not retried: it is returned.
func (r *Relay) ensureSchema(ctx context.Context) error {
	skip := func(name string, err error) bool {
		if !r.drv.PermissionDenied(err) {
			return false
		}
		r.log.Warn("relay: cannot create an index (no privilege); continuing without it", "index", name)
		return true
	}
	var outdated error
	retry(ctx, r.log, "create relay schema", func(ctx context.Context) error {
		err := r.setup(ctx, skip)
		if errors.Is(err, ErrSchemaOutdated) {
			outdated = fmt.Errorf("relay: %w", err)
			return nil
		}
		return err
	})
	return outdated
}

// Setup creates what the relay needs in the database when it is missing: the
// outbox table (partitioned by occurred_at with DropPartitions, on
// PostgreSQL), and the relay's tables and indexes (see Run); with
// DropPartitions also the partitions of the coming ranges. It then checks that
// the tables have what every migration makes (the writers' too), and fails
// with ErrSchemaOutdated, naming the migration to run, when they do not. Run
// does the same but the outbox table, whose absence it waits out, and checks
// only the tables the relay uses; call Setup first
// where the outbox hook would otherwise create the table (at db.Use)
// unpartitioned.
func (r *Relay) Setup(ctx context.Context) error {
	out := r.drv.Outbox(r.table)
	if !r.cfg.DropPartitions {
		if err := out.Create(ctx, r.db); err != nil {
			return fmt.Errorf("relay: create outbox: %w", err)
		}
	}
	if err := r.setup(ctx, nil); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	if err := out.Check(ctx, r.db); err != nil { // the writers' tables too: Setup made them
		return fmt.Errorf("relay: %w", err)
	}
	return nil
}

// setup creates the partitioned outbox (DropPartitions) when missing, the
// relay's objects, checks that the outbox and they have what every migration
// makes (ErrSchemaOutdated), learns whether the outbox is partitioned, and
// creates the partitions ahead.
func (r *Relay) setup(ctx context.Context, skip func(string, error) bool) error {
	canPartition := r.drv.Caps().Has(store.Partitions)
	if r.cfg.DropPartitions && canPartition {
		if err := r.st.CreatePartitioned(ctx, r.db); err != nil {
			return fmt.Errorf("create partitioned outbox: %w", err)
		}
	}
	if err := r.st.Create(ctx, r.db, r.cfg.Ordered, r.cfg.Retention > 0, skip); err != nil {
		return err
	}
	if err := r.st.Check(ctx, r.db, r.cfg.Ordered, r.cfg.Retention > 0); err != nil {
		return err
	}
	if !r.cfg.DropPartitions {
		return nil
	}
	partitioned := false
	if canPartition {
		p, err := r.st.Partitioned(ctx, r.db)
		if err != nil {
			return fmt.Errorf("look up partitions: %w", err)
		}
		partitioned = p
	}
	r.partitioned.Store(partitioned)
	if !partitioned {
		r.log.Warn("relay: DropPartitions is set but the outbox is not partitioned (or the database cannot partition it); published events are deleted row by row after the retention")
		return nil
	}
	if _, _, err := r.st.MaintainPartitions(ctx, r.db, r.cfg.PartitionInterval, r.cfg.Retention); err != nil {
		r.log.Warn("relay: partitions", "err", err)
	}
	return nil
}

// loop claims and publishes batches until ctx is done.
func (r *Relay) loop(ctx context.Context) {
	var (
		fails    int
		recheck  time.Duration // after a wake that found nothing: the events may not be committed yet
		errLimit = newLimiter(30 * time.Second)
		poll     = time.NewTimer(r.cfg.PollInterval)
	)
	defer poll.Stop()
	backlog := false
	for {
		n, full, err := r.round(ctx, backlog)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			fails++
			if errLimit.allow() {
				r.log.Warn("relay cycle failed; backing off", "err", err, "failures", fails, "suppressed", errLimit.suppressed())
			}
			if !sleep(ctx, faultBackoff(50*time.Millisecond, fails)) {
				return
			}
			continue
		}
		if fails > 0 {
			r.log.Info("relay resumed", "after_failures", fails)
			fails = 0
		}
		if backlog = full; full {
			continue // more may be due
		}
		var timeout <-chan time.Time
		if n == 0 && recheck > 0 && recheck < r.cfg.PollInterval {
			timeout = time.After(recheck)
			recheck *= 4
		} else {
			recheck = 0
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(r.cfg.PollInterval)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			recheck = time.Millisecond
		case <-timeout:
		case <-poll.C:
		}
	}
}

// workerRun is how many batches in a row a worker of a round may run: while
// its batches come back full it claims the next at once, without waiting for
// the other workers' batches, then the round ends (and the loop decides again).
const workerRun = 8

// round runs one batch, or under a backlog Workers at once, each running
// batches while they come back full (at most workerRun), each batch in its own
// transaction; in ordered mode each worker on its own share of the partitions.
// It returns how many events they claimed and whether a worker's last batch
// came back full (more may be due).
func (r *Relay) round(ctx context.Context, backlog bool) (n int, full bool, err error) {
	k := 1
	if backlog {
		k = r.cfg.Workers
	}
	if k == 1 {
		n, err = r.cycle(ctx, 0, 1)
		return n, n >= r.cfg.BatchSize, err
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for w := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range workerRun {
				got, cerr := r.cycle(ctx, w, k)
				mu.Lock()
				n += got
				more := got >= r.cfg.BatchSize
				if cerr != nil && err == nil {
					err = cerr
				}
				stop := !more || err != nil || ctx.Err() != nil || i == workerRun-1
				if stop {
					full = full || more
				}
				mu.Unlock()
				if stop {
					return
				}
			}
		}()
	}
	wg.Wait()
	return n, full, err
}

// cycle claims one batch, publishes it and marks the outcome. It returns how
// many events it claimed. worker and of split the ordered partitions between
// concurrent cycles.
func (r *Relay) cycle(ctx context.Context, worker, of int) (int, error) {
	if r.leases != nil {
		return r.cycleOrdered(ctx, worker, of)
	}
	return r.cycleUnordered(ctx)
}

// batchContexts returns the contexts of one batch: bctx for its database work,
// not cancelled with Run's context (so that a batch in flight finishes at
// shutdown) but bounded in time; and startBy, after which no Publish call starts
// (see publish), so that publishing ends by startBy + PublishTimeout.
func (r *Relay) batchContexts(ctx context.Context, startBy time.Time) (bctx, start context.Context, cancel func()) {
	bctx, c1 := context.WithDeadline(context.WithoutCancel(ctx), startBy.Add(r.cfg.PublishTimeout+30*time.Second))
	start, c2 := context.WithDeadline(bctx, startBy)
	return bctx, start, func() { c2(); c1() }
}

func (r *Relay) cycleUnordered(ctx context.Context) (int, error) {
	n, _, err := r.cycleUnorderedFrom(ctx, false)
	return n, err
}

// cycleUnorderedFrom claims one batch of unordered mode (from the head of the
// pending index when fromHead: the sweep), publishes it and marks the
// outcome. It returns how many events it claimed and how long the claim took.
// The driver claims as its database does: a batch that locked its rows holds
// them however long it is paused, and one that leased them has its marks
// fenced by the lease (a batch paused past it, whose rows another relay
// claimed since, changes nothing).
func (r *Relay) cycleUnorderedFrom(ctx context.Context, fromHead bool) (int, time.Duration, error) {
	bctx, startBy, cancel := r.batchContexts(ctx, time.Now().Add(2*r.cfg.PublishTimeout))
	defer cancel()
	deadline, _ := bctx.Deadline()
	start := time.Now()
	b, err := r.st.Claim(bctx, r.db, store.ClaimParams{
		Limit: r.cfg.BatchSize, Hold: time.Until(deadline) + time.Second, Keep: r.cfg.Retention > 0, FromHead: fromHead,
	})
	took := time.Since(start)
	if err != nil {
		return 0, took, fmt.Errorf("claim: %w", err)
	}
	defer b.Close()
	rows := toRows(b.Rows())
	if len(rows) == 0 {
		return 0, took, b.Commit(bctx)
	}
	r.at(relayhook.Claimed, nil)
	out := r.publishUnordered(startBy, rows)
	r.at(relayhook.Marks, nil)
	err = r.commitMarks(bctx, b, out, nil)
	r.at(relayhook.Done, err)
	return len(rows), took, err
}

// commitMarks counts the outcome (what was published happened, whether or not
// its marks commit), writes its marks in the batch and commits them, then
// lets the outage recovery see the batch (see health), fenced by all (ordered
// mode). When the batch's fence lost a lease (store.ErrLeaseLost), the marks
// of the partitions still held commit and the error is returned: the batch
// outlived its lease.
func (r *Relay) commitMarks(ctx context.Context, b store.Batch, out *outcome, all *store.Fence) error {
	r.m.record(out)
	lost, err := r.mark(ctx, b, out)
	if err != nil {
		return err
	}
	if err := b.Commit(ctx); err != nil {
		return err
	}
	if lost != nil {
		return fmt.Errorf("marks: %w", lost)
	}
	r.recoverOutage(ctx, out, all)
	return nil
}

// lastError is err as stored in last_error (store.LastError).
func lastError(err error) string { return store.LastError(err) }

// unstorableError is stored as last_error, in place of the error text, for a
// failure whose mark the database refused with its own text.
const unstorableError = "publish failed; the database refused to store the publisher's error text"

// outcome is the result of publishing a batch.
type outcome struct {
	ok       []*row            // published
	failed   []failure         // not published, to be retried or dead
	ev       outbound.Evidence // what the batch's Publish calls showed
	took     time.Duration
	failedAt time.Time // the database's time of the failure marks (set by mark)
}

// failure is a row whose publish failed.
type failure struct {
	row    *row
	err    string // as stored in last_error
	cause  error  // the publish's error, for the retry policy
	poison bool   // the row cannot be published at all: dead at once
	// rejected: the broker answered and refused this message (ErrRejected):
	// the broker works, the failure is the message's own.
	rejected bool
	end      time.Time // when the failed Publish call returned (monotonic clock)
}

func (o *outcome) add(r *row, res result) {
	if res.err == nil {
		o.ok = append(o.ok, r)
		return
	}
	o.failed = append(o.failed, failure{row: r, err: lastError(res.err), cause: res.err, poison: errors.Is(res.err, ErrUndecodable),
		rejected: outbound.Refused(res.err), end: res.end})
}

// publishFailures reports whether a Publish call failed in the batch (rows
// that could not become messages are not publish failures, nor messages the
// broker answered and rejected: it works) and whether one of those failures
// was an event's first attempt.
func (o *outcome) publishFailures() (failed, first bool) {
	for _, f := range o.failed {
		if !f.poison && !f.rejected {
			failed = true
			first = first || f.row.attempts == 0
		}
	}
	return failed, first
}

// mark records the outcome in the batch: published rows are deleted (or
// stamped processed), failed ones scheduled for a retry or dead; in ordered
// mode fenced by the batch's fence. lost is the fence's store.ErrLeaseLost:
// the marks of the partitions still held were written.
func (r *Relay) mark(ctx context.Context, b store.Batch, out *outcome) (lost, err error) {
	if r.hooks.afterPublish != nil {
		if err := r.hooks.afterPublish(); err != nil {
			return nil, err
		}
	}
	if len(out.ok) > 0 {
		ids := make([]string, len(out.ok))
		for i, rw := range out.ok {
			ids[i] = rw.id
		}
		if err := b.MarkPublished(ctx, ids); errors.Is(err, store.ErrLeaseLost) {
			lost = err
		} else if err != nil {
			return nil, fmt.Errorf("mark published: %w", err)
		}
	}
	if len(out.failed) == 0 {
		return lost, nil
	}
	dead, err := r.markFailed(ctx, b, out)
	if errors.Is(err, store.ErrLeaseLost) {
		return err, nil // which rows it wrote is unknown: no log of them
	}
	if err != nil {
		return nil, fmt.Errorf("mark failed: %w", err)
	}
	r.logFailures(out, dead)
	return lost, nil
}

// markFailed records every failure of out: an attempt, and a strike when the
// failure is confirmed (see evidence); death or the delay of the retry,
// counted from the database's clock, as the retry policy decides (retry.go).
// It returns the ids that went dead and sets out.failedAt to the database's
// time of the marks.
func (r *Relay) markFailed(ctx context.Context, b store.Batch, out *outcome) (map[string]bool, error) {
	r.awaitConfirmer(ctx, out)
	fs := make([]store.Failure, len(out.failed))
	dead := map[string]bool{}
	for i, f := range out.failed {
		strike := !f.poison && (f.rejected || out.ev.SucceededSince(f.end) ||
			r.cfg.Confirmer != nil && r.cfg.Confirmer.SucceededSince(f.end))
		d := r.decide(f, strike)
		fs[i] = store.Failure{ID: f.row.id, Err: f.err, Strike: strike, Dead: d.Dead, Delay: d.Delay}
		if fs[i].Dead {
			dead[f.row.id] = true
		}
	}
	at, marked, err := r.markFailures(ctx, b, fs)
	if err != nil {
		return nil, err
	}
	if len(marked) < len(fs) {
		dead = map[string]bool{}
		for _, f := range marked {
			if f.Dead {
				dead[f.ID] = true
			}
		}
	}
	out.failedAt = at
	r.m.died(len(dead))
	return dead, nil
}

// confirmWait bounds how long a batch whose failures nothing of its own
// confirmed waits for the Config.Confirmer to see a later publish succeed
// (the WAL relay publishes the stream's next events within milliseconds
// while there is traffic).
const confirmWait = 500 * time.Millisecond

// awaitConfirmer waits, when the relay has a Confirmer, until it confirms
// every failure of out that nothing else confirmed, or confirmWait (at most
// PublishTimeout, so that a short lease is not lost to it) passed,
// or ctx is done: the Confirmer's publishes run beside the batch, and the
// one that follows a failure may come a few milliseconds after it.
func (r *Relay) awaitConfirmer(ctx context.Context, out *outcome) {
	if r.cfg.Confirmer == nil {
		return
	}
	unconfirmed := func() bool {
		for _, f := range out.failed {
			if !f.poison && !f.rejected && !out.ev.SucceededSince(f.end) && !r.cfg.Confirmer.SucceededSince(f.end) {
				return true
			}
		}
		return false
	}
	if !unconfirmed() {
		return
	}
	wait := time.NewTimer(min(confirmWait, r.cfg.PublishTimeout))
	defer wait.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for unconfirmed() {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
			return
		case <-tick.C:
		}
	}
}

// markFailures writes the failure marks fs in the batch so that none of them
// can undo the marks written before them (the batch's published events, which
// would otherwise be published again on every cycle): in one call under a
// savepoint; if that fails, each failure alone under one, and one whose mark
// fails again once more with unstorableError for its text. A failure that
// cannot be marked even so leaves its event pending (its publish is retried;
// the batch tells its driver); it is logged. It returns the time of the
// marks, the failures marked, and an error only when the batch's transaction
// is lost or its fence found a lease lost (store.ErrLeaseLost).
func (r *Relay) markFailures(ctx context.Context, b store.Batch, fs []store.Failure) (time.Time, []store.Failure, error) {
	var at time.Time
	mark := func(batch []store.Failure) error {
		return b.Savepoint(ctx, func() error {
			t, err := b.MarkFailed(ctx, batch)
			if err == nil && (at.IsZero() || t.Before(at)) {
				at = t
			}
			return err
		})
	}
	err := mark(fs)
	if err == nil || errors.Is(err, store.ErrTxLost) || errors.Is(err, store.ErrLeaseLost) {
		// A lease lost: the savepoint took back the failures of the
		// partitions still held too; they are retried (unmarked).
		return at, fs, err
	}
	marked := make([]store.Failure, 0, len(fs))
	for _, f := range fs {
		err := mark([]store.Failure{f})
		if err != nil && !errors.Is(err, store.ErrTxLost) {
			r.log.Warn("the failure mark of an event was refused; retried without its error text",
				"event_id", f.ID, "err", err)
			f.Err = unstorableError
			err = mark([]store.Failure{f})
		}
		switch {
		case errors.Is(err, store.ErrTxLost), errors.Is(err, store.ErrLeaseLost):
			return at, nil, err
		case err != nil:
			r.log.Warn("the failure of an event could not be recorded; it stays pending", "event_id", f.ID, "err", err)
		default:
			marked = append(marked, f)
		}
	}
	return at, marked, nil
}

// logFailures logs the batch's failures, per topic and at most once per 30s
// per topic: the events that will be retried, and those that went dead.
func (r *Relay) logFailures(out *outcome, dead map[string]bool) {
	type tally struct {
		n    int
		last failure
	}
	var topics []string
	retrying, died := map[string]*tally{}, map[string]*tally{}
	for _, f := range out.failed {
		m := retrying
		if dead[f.row.id] {
			m = died
		}
		t := m[f.row.topic]
		if t == nil {
			if retrying[f.row.topic] == nil && died[f.row.topic] == nil {
				topics = append(topics, f.row.topic)
			}
			t = &tally{}
			m[f.row.topic] = t
		}
		t.n++
		t.last = f
	}
	for _, topic := range topics {
		if t := retrying[topic]; t != nil {
			if ok, suppressed := r.failLog.allow(topic); ok {
				r.log.Warn("publish failed; will retry", "topic", topic, "events", t.n, "event_id", t.last.row.id,
					"attempts", t.last.row.attempts+1, "err", t.last.err, "suppressed", suppressed)
			}
		}
		if t := died[topic]; t != nil {
			if ok, suppressed := r.deadLog.allow(topic); ok {
				r.log.Warn("events are dead after their last attempt; see admin.Outbox.Dead", "topic", topic, "events", t.n,
					"event_id", t.last.row.id, "attempts", t.last.row.attempts+1, "last_error", t.last.err, "suppressed", suppressed)
			}
		}
	}
}
