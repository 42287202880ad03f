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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/ident"
)

// Relay moves committed outbox rows to a Watermill publisher, at least once.
type Relay struct {
	cfg    Config
	table  ident.Table
	db     *sql.DB
	pub    message.Publisher
	q      queries
	log    *slog.Logger
	wake   chan struct{}
	leases *leases // ordered mode only
	m      metrics
	hooks  testHooks
	health health // this instance's evidence of outages, for the outage recovery

	failLog, deadLog *topicLimiter // log lines about failed and dead events, per topic
}

// testHooks lets this package's tests put faults at exact points.
type testHooks struct {
	afterPublish func() error // between the broker's ack and the mark; an error stands for a crash there
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
	table := ident.MustTable(cfg.Table) // checked by Validate
	r := &Relay{
		cfg:   cfg,
		table: table,
		db:    sqlDB,
		pub:   pub,
		q:     newQueries(table),
		log:   cfg.Logger.With("component", "herald.relay", "instance", cfg.InstanceID),
		wake:  make(chan struct{}, 1),
		m:     newMetrics(cfg.Table),

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
func (r *Relay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	start := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	r.ensureSchema(ctx)
	if !r.cfg.DisableListen {
		start(r.listen)
	}
	if r.cfg.Retention > 0 {
		start(r.cleaner)
	}
	if r.leases != nil {
		start(r.leases.run)
	}
	r.loop(ctx)
	wg.Wait()
	return nil
}

// ensureSchema creates the relay's tables and indexes when missing, retrying
// while the database is down. Without DDL rights they must exist already.
func (r *Relay) ensureSchema(ctx context.Context) {
	q := r.q.schema // leases, relays, ordered idx, aggregate idx, dead idx, processed idx
	stmts := []ddl{q[4]}
	if r.cfg.Ordered {
		stmts = append(stmts, q[0], q[1], q[2], q[3])
	}
	if r.cfg.Retention > 0 {
		stmts = append(stmts, q[5])
	}
	retry(ctx, r.log, "create relay schema", func(ctx context.Context) error {
		for _, s := range stmts {
			err := createIfMissing(ctx, r.db, s)
			var pgErr *pgconn.PgError
			if err != nil && !s.required && errors.As(err, &pgErr) && pgErr.Code == "42501" {
				// No right to create an index that only speeds things up: go on
				// without it (relay/migrations has it for the table's owner).
				r.log.Warn("relay: cannot create an index (no privilege); continuing without it", "index", s.name)
				continue
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
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

// round runs one batch, or under a backlog Workers batches at once (each in its
// own transaction; in ordered mode each on its own share of the partitions). It
// returns how many events they claimed and whether any batch came back full.
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
			got, cerr := r.cycle(ctx, w, k)
			mu.Lock()
			defer mu.Unlock()
			n += got
			full = full || got >= r.cfg.BatchSize
			if cerr != nil && err == nil {
				err = cerr
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
	bctx, startBy, cancel := r.batchContexts(ctx, time.Now().Add(2*r.cfg.PublishTimeout))
	defer cancel()
	tx, err := r.db.BeginTx(bctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	rows, err := claim(bctx, tx, r.q.claimUnordered, r.cfg.BatchSize)
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, tx.Commit()
	}
	return len(rows), r.commitMarks(bctx, tx, r.publishUnordered(startBy, rows))
}

// commitMarks counts the outcome (what was published happened, whether or not
// its marks commit), writes its marks in tx and commits it, then lets the
// outage recovery see the batch (see health).
func (r *Relay) commitMarks(ctx context.Context, tx *sql.Tx, out *outcome) error {
	r.m.record(out)
	if err := r.mark(ctx, tx, out); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit marks: %w", err)
	}
	r.recoverOutage(ctx, out)
	return nil
}

// lastError is err as stored in last_error: valid UTF-8 (a text column refuses
// anything else, which would fail the whole mark) and at most 2,000 bytes.
func lastError(err error) string {
	msg := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(msg) > 2000 {
		msg = strings.ToValidUTF8(msg[:2000], "") + "..."
	}
	return msg
}

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
// deleted (or stamped processed), failed ones scheduled for a retry or dead.
func (r *Relay) mark(ctx context.Context, tx execer, out *outcome) error {
	if r.hooks.afterPublish != nil {
		if err := r.hooks.afterPublish(); err != nil {
			return err
		}
	}
	if len(out.ok) > 0 {
		q := r.q.markDelete
		if r.cfg.Retention > 0 {
			q = r.q.markProcessed
		}
		ids := make([]string, len(out.ok))
		for i, rw := range out.ok {
			ids[i] = rw.id
		}
		if _, err := tx.ExecContext(ctx, q, ids); err != nil {
			return fmt.Errorf("mark published: %w", err)
		}
	}
	if len(out.failed) == 0 {
		return nil
	}
	dead, err := r.markFailed(ctx, tx, out)
	if err != nil {
		return fmt.Errorf("mark failed: %w", err)
	}
	r.logFailures(out, dead)
	return nil
}

// markFailed records every failure of out: an attempt, and a strike when the
// failure is confirmed (see evidence); a retry after the backoff of the new
// attempt count, or death at MaxAttempts strikes (at once for poison). It
// returns the ids that went dead and sets out.failedAt to the database's time.
func (r *Relay) markFailed(ctx context.Context, tx execer, out *outcome) (map[string]bool, error) {
	n := len(out.failed)
	ids, errs := make([]string, n), make([]string, n)
	poison, confirmed := make([]bool, n), make([]bool, n)
	for i, f := range out.failed {
		ids[i], errs[i], poison[i] = f.row.id, f.err, f.poison
		confirmed[i] = !f.poison && out.ev.confirms(f.end)
	}
	rows, err := tx.QueryContext(ctx, r.q.markFailed, ids, errs, poison, confirmed,
		float64(r.cfg.MinBackoff.Milliseconds()), float64(r.cfg.MaxBackoff.Milliseconds()), r.cfg.MaxAttempts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	dead := map[string]bool{}
	for rows.Next() {
		var (
			id     string
			isDead bool
		)
		if err := rows.Scan(&id, &isDead, &out.failedAt); err != nil {
			return nil, err
		}
		if isDead {
			dead[id] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	r.m.dead.Add(int64(len(dead)))
	return dead, nil
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

// metrics are the relay's counters, read by Stats and the Prometheus collector.
type metrics struct {
	published, failed, dead atomic.Int64
	durations               prometheus.Histogram // of a batch's publishing
}

func newMetrics(table string) metrics {
	return metrics{durations: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "herald_relay_publish_duration_seconds",
		Help:        "Time to publish one batch of events, from the first Publish call to the last return.",
		ConstLabels: prometheus.Labels{"table": table},
		Buckets:     prometheus.ExponentialBuckets(0.0005, 2, 16),
	})}
}

func (m *metrics) record(o *outcome) {
	m.published.Add(int64(len(o.ok)))
	m.failed.Add(int64(len(o.failed)))
	m.durations.Observe(o.took.Seconds())
}
