package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/relayhook"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/telemetry"
)

// ErrSchemaOutdated is returned (wrapped) by Setup and Run when the outbox or
// the relay's tables exist but lack a column, table or row that a migration
// makes (tables made by an earlier release); the message names the migration
// to run (migrations.Migrate applies it). It is outboxhook.ErrSchemaOutdated.
var ErrSchemaOutdated = store.ErrSchemaOutdated

// Relay moves committed outbox rows to a Watermill publisher, at least once.
type Relay struct {
	cfg    Config
	table  ident.Table
	db     *sql.DB
	pub    message.Publisher
	drv    store.Driver // the database's implementation
	tracer trace.Tracer
	st     store.Relay // the outbox table in it
	log    *slog.Logger
	wake   chan struct{}
	leases *leases // ordered mode only
	m      *metrics
	hooks  testHooks
	health health // this instance's evidence of outages, for the outage recovery

	failLog, deadLog *topicLimiter // log lines about failed and dead events, per topic

	partitioned atomic.Bool // DropPartitions, and the outbox is partitioned
}

// positioned is a store whose claims start from a remembered position
// instead of the head of the outbox's index, where the entries of published
// rows lie until vacuum removes them (PostgreSQL; see Config.SweepInterval).
// The relay tells it when the position can no longer be trusted, and sweeps.
type positioned interface {
	// Rewind makes the next claims start at the head: after a batch whose
	// marks may not have committed, or that left events untried, and when
	// partitions change hands.
	Rewind()
	// Sweeper returns a view of the store whose unordered claims start at the
	// head and leave the position alone.
	Sweeper() store.Relay
	// Probe looks for due events of the owned partitions below their
	// positions and lowers the positions to them (the sweep of ordered mode).
	// It returns how many it found.
	Probe(ctx context.Context, x store.Execer, partitions int, owned []int32) (int, error)
	// RecoverOwned is RecoverOutage on the events of the partitions leased
	// to instance (by the lease table, at the time of the update), for
	// ordered mode: the other instances keep positions past their own
	// waiting retries, which made due at once by another instance would let
	// the later events of their aggregates be claimed first. Each instance
	// recovers its own partitions when its own publishes succeed again.
	// Fenced: only the partitions whose leases the fence still holds.
	RecoverOwned(ctx context.Context, x store.Execer, since time.Time, topics, types []string, fence *store.Fence) (int64, error)
}

// rewind makes the next claims start at the head, if the store keeps a
// position.
func (r *Relay) rewind() {
	if p, ok := r.st.(positioned); ok {
		p.Rewind()
	}
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
// and keeps trying while the database is down.
func New(db *gorm.DB, pub message.Publisher, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if db == nil || pub == nil {
		return nil, errors.New("relay: db and publisher are required")
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	drv, err := drivers.For(db)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	table := ident.MustTable(cfg.Table) // checked by Validate
	r := &Relay{
		cfg:    cfg,
		table:  table,
		db:     sqlDB,
		pub:    pub,
		drv:    drv,
		st:     drv.Relay(table),
		tracer: telemetry.Tracer(cfg.TracerProvider),
		log:    cfg.Logger.With("component", "herald.relay", "instance", cfg.InstanceID),
		wake:   make(chan struct{}, 1),
		m:      newMetrics(cfg.MeterProvider, cfg.Table),

		failLog: newTopicLimiter(30*time.Second, maxLogTopics),
		deadLog: newTopicLimiter(30*time.Second, maxLogTopics),
	}
	if cfg.Ordered {
		r.leases = newLeases(r)
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
	if !r.cfg.DisableListen && r.drv.Waker() != nil {
		start(r.listen)
	}
	if r.cfg.Retention > 0 {
		start(r.cleaner)
	}
	if r.leases != nil {
		start(r.leases.run)
	}
	if _, ok := r.st.(positioned); ok {
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
	pr, ok := r.st.(store.PartitionRetention)
	if r.cfg.DropPartitions && ok {
		if err := pr.CreatePartitioned(ctx, r.db); err != nil {
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
	if ok {
		p, err := pr.Partitioned(ctx, r.db)
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
	if _, _, err := pr.MaintainPartitions(ctx, r.db, r.cfg.PartitionInterval, r.cfg.Retention); err != nil {
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
			r.rewind() // the batch's marks may not have committed
			if errLimit.allow() {
				r.log.Warn("relay cycle failed; backing off", "err", err, "failures", fails, "suppressed", errLimit.suppressed())
			}
			if !sleep(ctx, jitter(backoff(50*time.Millisecond, 30*time.Second, fails))) {
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
	return r.cycleUnorderedOn(ctx, r.st)
}

// cycleUnorderedOn is cycleUnordered claiming through st: the relay's store,
// or its sweeping view.
func (r *Relay) cycleUnorderedOn(ctx context.Context, st store.Relay) (int, error) {
	bctx, startBy, cancel := r.batchContexts(ctx, time.Now().Add(2*r.cfg.PublishTimeout))
	defer cancel()
	if !r.drv.Caps().RowLocks {
		return r.cycleLeased(bctx, startBy)
	}
	tx, err := r.db.BeginTx(bctx, r.drv.LockingTx())
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	claimed, err := st.ClaimLocked(bctx, tx, r.cfg.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	if len(claimed) == 0 {
		return 0, tx.Commit()
	}
	r.at(relayhook.Claimed, nil)
	rows := toRows(claimed)
	out := r.publishUnordered(startBy, rows)
	// Paused meanwhile, however long, the batch still holds its rows'
	// locks: nobody else claimed them, and its marks need no fence.
	r.at(relayhook.Marks, nil)
	err = r.commitMarks(bctx, tx, out, nil, nil)
	r.at(relayhook.Done, err)
	if err != nil {
		return len(rows), err
	}
	if len(out.ok)+len(out.failed) < len(rows) { // some untried (each row is in the outcome at most once)
		r.rewind() // pending again, below the position
	}
	return len(rows), nil
}

// cycleLeased is cycleUnordered on a database without row locks: the claim
// leases its rows for the batch's whole time (they are nobody else's until
// then, and come back by themselves if this process dies), publishes outside
// any transaction, and marks in one of its own. Rows the batch had no time to
// publish are made due again. The marks (and that release) are fenced by the
// claim's lease: a batch paused past it, whose rows another relay claimed
// since, changes nothing.
func (r *Relay) cycleLeased(bctx, startBy context.Context) (int, error) {
	deadline, _ := bctx.Deadline()
	claimed, err := r.st.ClaimLeased(bctx, r.db, r.cfg.BatchSize, time.Until(deadline)+time.Second)
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	if len(claimed) == 0 {
		return 0, nil
	}
	r.at(relayhook.Claimed, nil)
	rows := toRows(claimed)
	out := r.publishUnordered(startBy, rows)
	r.at(relayhook.Marks, nil)
	err = r.leasedMarks(bctx, rows, out)
	r.at(relayhook.Done, err)
	return len(rows), err
}

// leasedMarks releases the rows of a leased batch that had no time to
// publish and writes its marks, in one transaction.
func (r *Relay) leasedMarks(ctx context.Context, rows []*row, out *outcome) error {
	tx, err := r.db.BeginTx(ctx, r.drv.LockingTx())
	if err != nil {
		return fmt.Errorf("begin marks: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if untried := out.untried(rows); len(untried) > 0 {
		if err := r.st.Unlease(ctx, tx, untried); err != nil {
			return fmt.Errorf("unlease: %w", err)
		}
	}
	return r.commitMarks(ctx, tx, out, nil, nil)
}

// marksTx writes the marks of an ordered batch, fenced by fence, in a
// transaction of its own; all fences the outage recovery after it.
func (r *Relay) marksTx(ctx context.Context, out *outcome, fence, all *store.Fence) error {
	tx, err := r.db.BeginTx(ctx, r.drv.LockingTx())
	if err != nil {
		return fmt.Errorf("begin marks: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	return r.commitMarks(ctx, tx, out, fence, all)
}

// commitMarks counts the outcome (what was published happened, whether or not
// its marks commit), writes its marks in tx, fenced by fence (ordered mode),
// and commits it, then lets the outage recovery see the batch (see health),
// fenced by all. When the fence lost a lease (store.ErrLeaseLost), the marks
// of the partitions still held commit and the error is returned: the batch
// outlived its lease, and the next claims start over.
func (r *Relay) commitMarks(ctx context.Context, tx *sql.Tx, out *outcome, fence, all *store.Fence) error {
	r.m.record(out)
	lost, err := r.mark(ctx, tx, out, fence)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit marks: %w", err)
	}
	if lost != nil {
		return fmt.Errorf("marks: %w", lost)
	}
	r.recoverOutage(ctx, out, all)
	return nil
}

// lastError is err as stored in last_error, on every database: NUL bytes
// (which PostgreSQL's text refuses) and invalid UTF-8 (which a text column
// may refuse) replaced by U+FFFD, and at most 2,000 bytes.
func lastError(err error) string {
	msg := strings.ToValidUTF8(strings.ReplaceAll(err.Error(), "\x00", "\uFFFD"), "\uFFFD")
	if len(msg) > 2000 {
		msg = strings.ToValidUTF8(msg[:2000], "") + "..."
	}
	return msg
}

// unstorableError is stored as last_error, in place of the error text, for a
// failure whose mark the database refused with its own text.
const unstorableError = "publish failed; the database refused to store the publisher's error text"

// outcome is the result of publishing a batch.
type outcome struct {
	ok       []*row    // published
	failed   []failure // not published, to be retried or dead
	ev       evidence  // what the batch's Publish calls showed
	took     time.Duration
	failedAt time.Time // the database's time of the failure marks (set by mark)
}

// failure is a row whose publish failed.
type failure struct {
	row    *row
	err    string    // as stored in last_error
	poison bool      // the row cannot be published at all: dead at once
	end    time.Time // when the failed Publish call returned (monotonic clock)
}

func (o *outcome) add(r *row, res result) {
	if res.err == nil {
		o.ok = append(o.ok, r)
		return
	}
	o.failed = append(o.failed, failure{row: r, err: lastError(res.err), poison: errors.Is(res.err, ErrUndecodable), end: res.end})
}

// untried returns the keys of rows the batch had no time to publish (neither
// published nor failed).
func (o *outcome) untried(rows []*row) []store.Key {
	done := make(map[string]bool, len(o.ok)+len(o.failed))
	for _, rw := range o.ok {
		done[rw.id] = true
	}
	for _, f := range o.failed {
		done[f.row.id] = true
	}
	var out []store.Key
	for _, rw := range rows {
		if !done[rw.id] {
			out = append(out, rw.key())
		}
	}
	return out
}

// publishFailures reports whether a Publish call failed in the batch (rows
// that could not become messages are not publish failures) and whether one of
// those failures was an event's first attempt.
func (o *outcome) publishFailures() (failed, first bool) {
	for _, f := range o.failed {
		if !f.poison {
			failed = true
			first = first || f.row.attempts == 0
		}
	}
	return failed, first
}

// mark records the outcome in the claiming transaction: published rows are
// deleted (or stamped processed), failed ones scheduled for a retry or dead;
// in ordered mode fenced by fence. lost is the fence's store.ErrLeaseLost:
// the marks of the partitions still held were written.
func (r *Relay) mark(ctx context.Context, tx execer, out *outcome, fence *store.Fence) (lost, err error) {
	if r.hooks.afterPublish != nil {
		if err := r.hooks.afterPublish(); err != nil {
			return nil, err
		}
	}
	if len(out.ok) > 0 {
		keys := make([]store.Key, len(out.ok))
		for i, rw := range out.ok {
			keys[i] = rw.key()
		}
		if err := r.st.MarkPublished(ctx, tx, keys, r.cfg.Retention > 0, fence); errors.Is(err, store.ErrLeaseLost) {
			lost = err
		} else if err != nil {
			return nil, fmt.Errorf("mark published: %w", err)
		}
	}
	if len(out.failed) == 0 {
		return lost, nil
	}
	dead, err := r.markFailed(ctx, tx, out, fence)
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
// failure is confirmed (see evidence); death at MaxAttempts strikes (at once
// for poison), or a retry after the jittered backoff of the new attempt count
// (MinBackoff·2^(attempts-1), capped at MaxBackoff, between half and all of
// it), counted from the database's clock. It returns the ids that went dead
// and sets out.failedAt to the database's time of the marks.
func (r *Relay) markFailed(ctx context.Context, tx execer, out *outcome, fence *store.Fence) (map[string]bool, error) {
	fs := make([]store.Failure, len(out.failed))
	dead := map[string]bool{}
	for i, f := range out.failed {
		strike := !f.poison && out.ev.confirms(f.end)
		fs[i] = store.Failure{
			ID: f.row.id, Lease: f.row.lease, Err: f.err, Strike: strike,
			Dead:  f.poison || (strike && f.row.strikes+1 >= r.cfg.MaxAttempts),
			Delay: jitter(backoff(r.cfg.MinBackoff, r.cfg.MaxBackoff, f.row.attempts+1)),
		}
		if fs[i].Dead {
			dead[f.row.id] = true
		}
	}
	at, marked, err := r.markFailures(ctx, tx, fs, fence)
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

// markFailures writes the failure marks fs in tx so that none of them can
// undo the marks written before them in tx (the batch's published events,
// which would otherwise be published again on every cycle): in one call
// under a savepoint; if that fails, each failure alone under one, and one
// whose mark fails again once more with unstorableError for its text. A
// failure that cannot be marked even so leaves its event pending (its
// publish is retried); it is logged. It returns the time of the marks, the
// failures marked, and an error only when tx is lost or fence found a lease
// lost (store.ErrLeaseLost).
func (r *Relay) markFailures(ctx context.Context, tx execer, fs []store.Failure, fence *store.Fence) (time.Time, []store.Failure, error) {
	var at time.Time
	mark := func(batch []store.Failure) error {
		return store.Savepoint(ctx, tx, "herald_mark_failed", func() error {
			t, err := r.st.MarkFailed(ctx, tx, batch, fence)
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
			r.rewind() // pending, and maybe below the position
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
				r.log.Warn("events are dead after their last attempt; see Relay.Dead", "topic", topic, "events", t.n,
					"event_id", t.last.row.id, "attempts", t.last.row.attempts+1, "last_error", t.last.err, "suppressed", suppressed)
			}
		}
	}
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}
