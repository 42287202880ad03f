package fleet

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/relayhook"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/store/sqlkit"
	"github.com/heraldgo/herald/relay"
)

// ErrRunning is returned by Run when the fleet is running already.
var ErrRunning = errors.New("fleet: already running")

// Fleet relays the outboxes of many tenants to one publisher, each through a
// relay.Relay of its own configuration (Config.Relay), within one budget of
// connections (Config.MaxConns): idle tenants are probed, one statement each,
// at intervals that grow while they stay idle; a tenant with work is relayed
// until its batches come back short, taking its turn (Config.Slice) when
// others wait; a failing tenant is backed off alone.
type Fleet struct {
	cfg     Config
	pub     message.Publisher
	log     *slog.Logger
	conns   *budget
	kick    chan struct{}
	running atomic.Bool
	listen  []*relay.TenantListener // Config.Listen's

	prefetchedChecks atomic.Int64  // relays' first runs that checked their schema from a prefetched read
	probeTimeout     time.Duration // probeTimeout, shorter in tests

	mu         sync.Mutex
	tenants    map[string]*tenant
	queue      []*tenant // tenants with work waiting for a place, first come first
	woken      map[string]bool
	probing    int
	scanAt     time.Time               // step's next look for tenants due a probe: the earliest next it saw (schedule lowers it)
	probesFull bool                    // step left tenants due a probe as Probes were all taken: a probe's end has it look again
	runs       []*tenant               // the active tenants, for their turns
	unknown    bool                    // a woken id is not a tenant yet: refresh
	listed     bool                    // Config.Tenants was called (Stats before Run calls it)
	members    []string                // the live members, with Config.Members
	labels     int                     // tenants whose metrics carry their tenant
	unobs      []func()                // gauges of pools let go, unregistered by Run outside mu (unobserve)
	probeConns map[*gorm.DB]*probeConn // by shared pool (Tenant.DB), made at its first probe
	wg         sync.WaitGroup
}

// New returns a fleet that relays the tenants cfg.Tenants returns to pub. It
// checks cfg (a bad config fails here) but touches no database: Run does.
func New(pub message.Publisher, cfg Config) (*Fleet, error) {
	if pub == nil {
		return nil, errors.New("fleet: a publisher is required")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "herald.fleet", "instance", cfg.Relay.InstanceID)
	listen := make([]*relay.TenantListener, len(cfg.Listen))
	for i, db := range cfg.Listen {
		var err error
		if listen[i], err = relay.NewTenantListener(db, cfg.Channel, log); err != nil {
			return nil, fmt.Errorf("fleet: Listen[%d]: %w", i, err)
		}
	}
	return &Fleet{
		cfg:          cfg,
		pub:          pub,
		log:          log,
		conns:        newBudget(cfg.MaxConns),
		probeTimeout: probeTimeout,
		kick:         make(chan struct{}, 1),
		listen:       listen,
		tenants:      map[string]*tenant{},
		woken:        map[string]bool{},
	}, nil
}

// Instance is the name this fleet process goes by: in every tenant's
// database (its relays' InstanceID) and among the members.
func (f *Fleet) Instance() string { return f.cfg.Relay.InstanceID }

// Wake tells the fleet that events of tenant id were committed: it is
// relayed as soon as a place is free, without waiting for its next probe.
// Call it from the writers' process (outboxhook.Config.Notify); it never
// blocks. Notifications naming a tenant call it too (Config.Listen). An id
// the fleet does not know yet makes it call Config.Tenants again at once (at
// most once a second), so that a tenant added since the last refresh is
// relayed at once too.
func (f *Fleet) Wake(id string) {
	f.mu.Lock()
	f.woken[id] = true
	f.mu.Unlock()
	f.poke()
}

func (f *Fleet) poke() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Run relays until ctx is cancelled, then stops every tenant's relay (each
// finishes or releases its batch in flight), closes the pools it opened and
// returns nil. Tenants whose database is down or whose events fail are
// retried, alone, for as long as it runs.
func (f *Fleet) Run(ctx context.Context) error {
	if !f.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer f.running.Store(false)
	defer f.shutdown()
	defer f.observe()()
	var m *members
	if f.cfg.Members != nil {
		var err error
		if m, err = newMembers(f.cfg.Members, f.cfg.Relay.InstanceID, f.cfg.MemberTTL); err != nil {
			return err
		}
		defer m.leave()
	}
	for _, l := range f.listen { // they end with ctx; shutdown waits for them
		f.wg.Go(func() { _ = l.Run(ctx, f.Wake) })
	}
	var refreshAt, refreshed, beatAt time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		f.unobserve()
		now := time.Now()
		f.mu.Lock()
		unknown := f.unknown && now.Sub(refreshed) >= time.Second
		f.mu.Unlock()
		if !now.Before(refreshAt) || unknown {
			f.refresh(ctx)
			refreshAt, refreshed = now.Add(f.cfg.RefreshInterval), now
		}
		if m != nil && !now.Before(beatAt) {
			if live, err := m.beat(ctx); err != nil {
				if ctx.Err() == nil {
					f.log.Warn("fleet: members: beat failed; serving the tenants as before", "err", err)
				}
			} else {
				f.assign(live)
			}
			beatAt = now.Add(f.cfg.MemberTTL / 3)
		}
		wait := f.step(ctx, time.Now())
		wait = min(wait, time.Until(refreshAt))
		if m != nil {
			wait = min(wait, time.Until(beatAt))
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-f.kick:
			timer.Stop() // Reset drops a tick it may have left (Go 1.23+), or it wakes the loop once more
		case <-timer.C:
		}
	}
}

// refresh calls Config.Tenants and makes the fleet's tenants its list.
func (f *Fleet) refresh(ctx context.Context) {
	list, err := f.cfg.Tenants(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("fleet: listing the tenants failed; keeping the last list", "err", err)
		}
		return
	}
	seen := make(map[string]bool, len(list))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unknown, f.listed = false, true
	for _, def := range list {
		if err := checkTenant(def); err != nil {
			f.log.Warn("fleet: tenant left out", "tenant", def.ID, "err", err)
			continue
		}
		if seen[def.ID] {
			f.log.Warn("fleet: tenant listed twice; the first one counts", "tenant", def.ID)
			continue
		}
		seen[def.ID] = true
		if _, ok := f.tenants[def.ID]; !ok {
			t := &tenant{def: def, every: f.cfg.MinProbe, labelled: f.labels < f.cfg.TenantMetrics}
			if t.labelled {
				f.labels++
			}
			if !f.owns(def.ID) {
				t.st = elsewhere
			}
			f.tenants[def.ID] = t
			f.schedule(t, time.Time{})
		}
	}
	for id, t := range f.tenants {
		if !seen[id] {
			f.drop(t)
		}
	}
}

// checkTenant reports what is wrong with a tenant's definition.
func checkTenant(def Tenant) error {
	switch {
	case def.ID == "":
		return errors.New("no ID")
	case (def.DB == nil) == (def.Open == nil):
		return errors.New("set DB or Open, one of them")
	}
	return nil
}

// drop forgets t: at once when nothing runs for it, else when its probe or
// run ends (which closes its pool).
func (f *Fleet) drop(t *tenant) {
	delete(f.tenants, t.def.ID)
	delete(f.woken, t.def.ID)
	if t.labelled {
		f.labels--
	}
	t.removed = true
	f.dequeue(t)
	switch t.st {
	case active:
		t.stop(stopRemoved)
	case probing:
	default:
		f.closePool(t)
	}
}

// step starts what is due: probes of idle tenants, runs of tenants with
// work while connections are free, and the end of a turn for a tenant that
// had its Slice while others wait. It returns how long until something is
// due again.
func (f *Fleet) step(ctx context.Context, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	wait := f.cfg.MaxProbe
	for id := range f.woken {
		t, ok := f.tenants[id]
		switch {
		case !ok:
			f.unknown = true
		case t.st == idle:
			f.enqueue(t)
		case t.st == failing:
			f.schedule(t, now)
		case t.st == probing || t.st == active: // its events may be past what it reads now
			t.rewake = true
		}
		delete(f.woken, id)
	}
	if f.unknown { // Run refreshes within a second
		wait = min(wait, time.Second)
	}
	// Probes, the most overdue first. The tenants are looked through only
	// when one may be due (scanAt): a fleet of many tenants steps at every
	// run's end.
	if !now.Before(f.scanAt) {
		f.scanAt = now.Add(f.cfg.MaxProbe)
		var due []*tenant
		for _, t := range f.tenants {
			if t.st != idle && t.st != failing {
				continue
			}
			if t.next.After(now) {
				if t.next.Before(f.scanAt) {
					f.scanAt = t.next
				}
				continue
			}
			due = append(due, t)
		}
		slices.SortFunc(due, func(a, b *tenant) int { return a.next.Compare(b.next) })
		for _, g := range probeGroups(due) {
			if f.probing >= f.cfg.Probes { // the rest when a probe ends (not at every step meanwhile: a look reads every tenant)
				f.probesFull = true
				break
			}
			f.probing++
			for _, t := range g {
				t.st = probing
			}
			f.goProbe(ctx, g)
		}
	}
	wait = min(wait, f.scanAt.Sub(now))
	// Runs, first come first served.
	for len(f.queue) > 0 && f.conns.try(f.cfg.ConnsPerTenant) {
		t := f.queue[0]
		f.queue = f.queue[1:]
		f.goRun(ctx, t, now)
	}
	// Turns: as many as wait end, the longest running first.
	if n := len(f.queue); n > 0 {
		var long []*tenant
		for _, t := range f.runs {
			if t.stopping == stopNone {
				if d := t.since.Add(f.cfg.Slice).Sub(now); d > 0 {
					wait = min(wait, d)
				} else {
					long = append(long, t)
				}
			}
		}
		slices.SortFunc(long, func(a, b *tenant) int { return a.since.Compare(b.since) })
		for _, t := range long[:min(n, len(long))] {
			t.stop(stopTurn)
		}
	}
	return wait
}

// schedule sets the next probe of t (idle or failing) at at, and has step
// look for it then.
func (f *Fleet) schedule(t *tenant, at time.Time) {
	t.next = at
	if at.Before(f.scanAt) {
		f.scanAt = at
	}
}

// enqueue makes t wait for a place to be relayed.
func (f *Fleet) enqueue(t *tenant) {
	t.st, t.rewake = queued, false
	f.queue = append(f.queue, t)
}

func (f *Fleet) dequeue(t *tenant) {
	f.queue = slices.DeleteFunc(f.queue, func(q *tenant) bool { return q == t })
}

// maxGroup is how many tenants of one shared pool one probe asks at most.
const maxGroup = 100

// probeGroups groups the tenants due for a probe, in order: the tenants of
// one shared pool (Tenant.DB) that are not failing and not probed alone go
// together, up to maxGroup, each other tenant alone.
func probeGroups(due []*tenant) [][]*tenant {
	var groups [][]*tenant
	open := map[*gorm.DB]int{} // a pool's group that has room
	for _, t := range due {
		if t.def.DB == nil || t.fails > 0 || t.alone {
			groups = append(groups, []*tenant{t})
			continue
		}
		i, ok := open[t.def.DB]
		if !ok || len(groups[i]) == maxGroup {
			i = len(groups)
			open[t.def.DB] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], t)
	}
	return groups
}

// goProbe asks the databases of ts (one tenant, or tenants of one shared
// pool), in a goroutine and one statement, whether anything is pending and
// when it comes due: a tenant with an event due queues for a place; another
// is probed again later, the longer it stays idle the later (MaxProbe at
// most), or when its earliest event comes due.
func (f *Fleet) goProbe(ctx context.Context, ts []*tenant) {
	f.wg.Go(func() {
		res := f.probe(ctx, ts)
		f.mu.Lock()
		defer f.mu.Unlock()
		defer f.poke()
		f.probing--
		if f.probesFull { // the tenants step left due: at the next step
			f.probesFull = false
			f.scanAt = time.Time{}
		}
		now := time.Now()
		for i, t := range ts {
			f.probed(ctx, t, res[i], now)
		}
	})
}

// probed settles t's probe.
func (f *Fleet) probed(ctx context.Context, t *tenant, r probeResult, now time.Time) {
	if ctx.Err() != nil {
		t.st = idle
		return
	}
	switch {
	case t.removed:
		f.closePool(t)
	case !f.owns(t.def.ID): // the members changed meanwhile
		t.st = elsewhere
		f.closePool(t)
	case r.slow: // at once again, alone
		t.alone, t.st = true, idle
		f.schedule(t, now)
	case r.err != nil:
		f.failed(t, r.err, now)
	case r.OK && r.Wait <= 0:
		f.recovered(t)
		t.rejoin(r)
		f.enqueue(t)
	case t.rewake:
		f.recovered(t)
		f.enqueue(t)
	default:
		f.recovered(t)
		t.st = idle
		t.rejoin(r)
		t.every = min(2*t.every, f.cfg.MaxProbe)
		f.schedule(t, now.Add(t.every))
		if r.OK && r.Wait < t.every {
			f.schedule(t, now.Add(r.Wait))
		}
		if t.def.Open != nil && t.pool != nil && now.Sub(t.worked) > f.cfg.IdleClose {
			f.closePool(t)
		}
	}
}

// rejoin puts t, probed alone, back with the others of its shared pool once
// a probe of it alone answered in under a tenth of slowProbe.
func (t *tenant) rejoin(r probeResult) {
	if t.alone && r.took < slowProbe/10 {
		t.alone, t.claimed = false, 0
	}
}

// probeResult is a tenant's probe: when its earliest pending event is due,
// or why it could not be told.
type probeResult struct {
	sqlkit.Next
	err  error
	took time.Duration // a probe of the tenant alone: how long it took
	slow bool          // the probe with others took slowProbe and was given up
}

// slowProbe is how long a probe of a shared pool's tenants together (or of
// one on the probe connection) may take: then it is given up and its tenants
// are probed again at once, each alone through the pool, until a probe of it
// alone takes under a tenth of it. A tenant's probe reads its pending index
// from the start: after a backlog was burnt, through the index entries of
// every row published and not yet vacuumed (a million took 3.9 s to read the
// first time, 2026-12-07), and on the probe connection every other tenant's
// probe would wait for it.
const slowProbe = time.Second

// probeTimeout is how long a probe through a tenant's pool (alone) may
// take: then the tenant counts as failing, backed off as when its database is
// down, so that tenants whose probes hang (their outboxes locked, their
// servers unresponsive) cannot hold every one of the Probes at once.
const probeTimeout = 10 * slowProbe

// aloneAfter is how many events a tenant's runs may claim before it is
// probed alone (as after a slow probe): a probe reads the index entries of
// the rows published since the last vacuum, about 4 µs each the first time.
const aloneAfter = 20000

// probe runs the probe statement of ts on one connection of the budget (a
// shared pool's probe connection, see probeConn): one tenant's, or one for
// them all (the tenants of one shared pool); when that fails, each tenant's
// alone through its pool, so that an error is its own tenant's.
func (f *Fleet) probe(ctx context.Context, ts []*tenant) []probeResult {
	res := make([]probeResult, len(ts))
	// The tenants of a shared pool that are not failing are probed on its
	// probe connection (probeConn), one probe at a time: taken before a
	// place of the budget, so that a probe waiting for it holds none.
	var pc *probeConn
	if db := ts[0].def.DB; db != nil && ts[0].fails == 0 && !ts[0].alone {
		pc = f.probeConnOf(db)
		pc.mu.Lock()
		defer pc.mu.Unlock()
	}
	if err := f.conns.acquire(ctx, 1); err != nil {
		for i := range res {
			res[i].err = err
		}
		return res
	}
	defer f.conns.release(1)
	ps := make([]*pool, len(ts))
	for i, t := range ts {
		p, err := f.open(ctx, t)
		if err != nil {
			res[i].err = err
			continue
		}
		defer p.shed()
		ps[i] = p
	}
	defer f.clean(ctx, ts, ps, res) // after the probe, on its connection
	var pinned *sql.Conn
	if pc != nil && ps[0] != nil {
		pinned, _ = pc.take(ctx, ps[0].sql) // none: the pool's connections, as below
	}
	if len(ts) > 1 && !slices.Contains(ps, nil) {
		hbs := make([]store.Heartbeats, len(ps))
		for i, p := range ps {
			hbs[i] = p.hb
		}
		// On the probe connection, and when that fails, through the pool.
		xs := []store.Execer{ps[0].sql}
		if pinned != nil {
			xs = []store.Execer{pinned, ps[0].sql}
		}
		for k, x := range xs {
			pinnedTry := k == 0 && pinned != nil
			var nexts []sqlkit.Next
			slow, err := within(ctx, slowProbe, func(ctx context.Context) (err error) {
				nexts, err = sqlkit.Nexts(ctx, x, hbs)
				return err
			})
			if err == nil {
				for i, n := range nexts {
					res[i].Next = n
				}
				f.prefetchSchemas(ctx, x, ps, res)
				return res
			}
			if pinnedTry {
				pc.drop()
			}
			if slow { // which tenant is slow is not known: each alone
				for i := range res {
					res[i].slow = true
				}
				return res
			}
		}
	}
	for i, p := range ps {
		if p == nil {
			continue
		}
		if pinned != nil && pc.conn != nil && len(ts) == 1 {
			slow, err := within(ctx, slowProbe, func(ctx context.Context) (err error) {
				res[i].Wait, res[i].OK, err = p.hb.Next(ctx, pinned)
				return err
			})
			if res[i].err = err; err == nil {
				f.prefetchSchemas(ctx, pinned, ps, res)
				continue
			}
			pc.drop() // and probed again through the pool, where its error is its own
			if slow {
				res[i] = probeResult{slow: true}
				continue
			}
		}
		start := time.Now()
		hung, err := within(ctx, f.probeTimeout, func(ctx context.Context) (err error) {
			res[i].Wait, res[i].OK, err = p.hb.Next(ctx, p.sql)
			return err
		})
		if res[i].err, res[i].took = err, time.Since(start); hung {
			res[i].err = fmt.Errorf("probe: no answer within %s: %w", f.probeTimeout, err)
		}
	}
	return res
}

// within runs q with d to answer; late says that q failed because d ran out
// (not ctx).
func within(ctx context.Context, d time.Duration, q func(context.Context) error) (late bool, err error) {
	qctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err = q(qctx)
	return err != nil && qctx.Err() != nil && ctx.Err() == nil, err
}

// maxPrefetch is how many objects one statement of prefetchSchemas looks up
// at most (about 20 a tenant).
const maxPrefetch = 500

// prefetchSchemas reads, in one statement on x (one per maxPrefetch
// objects), the catalog for the first runs of the relays of ps (the tenants
// of one shared pool, just probed on x: res) that the probe found due and
// that have not run: each relay's start then checks its schema from that read
// (migrate.Prefetched) instead of a statement of its own on a connection of
// the pool, new to the tenant. A failure only loses the read: each relay
// reads the catalog itself, as without it.
func (f *Fleet) prefetchSchemas(ctx context.Context, x store.Execer, ps []*pool, res []probeResult) {
	params := store.RelayCreateParams{Ordered: f.cfg.Relay.Ordered, Retention: f.cfg.Relay.Retention > 0, Check: true}
	var (
		due  []*pool
		objs []store.Object
	)
	for i, p := range ps {
		if !res[i].OK || res[i].Wait > 0 || p.ran.Load() {
			continue
		}
		look, err := p.drv.RelayLookups(p.table, params)
		if err != nil {
			return
		}
		due = append(due, p)
		objs = append(objs, look...)
	}
	if len(due) == 0 {
		return
	}
	found := make([]bool, 0, len(objs))
	for c := range slices.Chunk(objs, maxPrefetch) { // MySQL reads a column per object
		got, err := ps[0].drv.ObjectsExist(ctx, x, c)
		if err != nil {
			return
		}
		found = append(found, got...)
	}
	read, err := migrate.Prefetch(objs, found)
	if err != nil {
		return
	}
	for _, p := range due {
		p.prefetched.Store(read)
	}
}

// clean runs the Cleanup of the relays of ts whose cleanup is due (every
// Relay.CleanupInterval, with Relay.Retention): a tenant's relay cleans while
// it runs, and an idle tenant, whose relay does not run, at its probes.
func (f *Fleet) clean(ctx context.Context, ts []*tenant, ps []*pool, res []probeResult) {
	if f.cfg.Relay.Retention <= 0 {
		return
	}
	now := time.Now()
	for i, t := range ts {
		f.mu.Lock()
		if t.cleanAt.IsZero() { // first seen: a cleanup interval from now, as a relay's first
			t.cleanAt = now.Add(f.cfg.Relay.CleanupInterval)
		}
		due := ps[i] != nil && res[i].err == nil && !res[i].slow && !now.Before(t.cleanAt)
		if due {
			t.cleanAt = now.Add(f.cfg.Relay.CleanupInterval)
		}
		f.mu.Unlock()
		if !due {
			continue
		}
		if _, err := ps[i].rel.Cleanup(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("fleet: cleanup failed; tried again a cleanup interval later", "tenant", t.def.ID, "err", err)
		}
	}
}

// goRun relays t, in a goroutine, on the ConnsPerTenant connections taken
// for it, until a round of its relay comes back short (or fails), or the
// fleet ends its turn.
func (f *Fleet) goRun(ctx context.Context, t *tenant, now time.Time) {
	rctx, cancel := context.WithCancel(ctx)
	t.st, t.since, t.cancel, t.stopping = active, now, cancel, stopNone
	f.runs = append(f.runs, t)
	f.wg.Go(func() {
		defer f.conns.release(f.cfg.ConnsPerTenant)
		defer cancel()
		claimed, err := f.run(rctx, t, cancel)
		f.mu.Lock()
		defer f.mu.Unlock()
		defer f.poke()
		t.cancel = nil
		f.runs = slices.DeleteFunc(f.runs, func(r *tenant) bool { return r == t })
		now := time.Now()
		if claimed > 0 {
			t.worked = now
		}
		if t.claimed += claimed; t.claimed >= aloneAfter {
			t.alone = true
		}
		switch {
		case ctx.Err() != nil:
			t.st = idle
		case t.removed:
			f.closePool(t)
		case err != nil:
			f.failed(t, err, now)
		case t.stopping == stopMoved:
			t.st = elsewhere
			f.closePool(t)
		case t.stopping == stopTurn, t.rewake:
			f.enqueue(t) // at the back
		default:
			f.recovered(t)
			t.st = idle
			if claimed > 0 {
				t.every = f.cfg.MinProbe
			} else { // woken, or probed, for nothing it could claim
				t.every = min(2*t.every, f.cfg.MaxProbe)
			}
			f.schedule(t, now.Add(t.every))
		}
	})
}

// run relays t until its relay's round comes back short or fails, or ctx
// ends; it returns how many events it claimed, and the error that stopped it.
func (f *Fleet) run(ctx context.Context, t *tenant, stop context.CancelFunc) (int64, error) {
	p, err := f.open(ctx, t)
	if err != nil {
		return 0, err
	}
	defer p.shed()
	start := time.Now()
	var (
		claimed  atomic.Int64
		roundErr atomic.Pointer[error]
	)
	// An ordered relay that holds no lease yet claims nothing: it is given
	// until its leases' next try (a third of LeaseDuration) to take some.
	patience := f.cfg.Relay.LeaseDuration / 3
	round := func(r relayhook.RoundInfo) {
		claimed.Add(int64(r.Claimed))
		if r.Claimed > 0 {
			f.mu.Lock()
			t.worked = time.Now()
			f.mu.Unlock()
		}
		switch {
		case r.Err != nil:
			roundErr.CompareAndSwap(nil, &r.Err)
			stop()
		case r.Claimed > 0 && r.Claimed < f.cfg.Relay.BatchSize, // short: done for now
			r.Claimed == 0 && (r.Leased || time.Since(start) >= patience):
			stop()
		}
	}
	rctx, read := p.takePrefetched(relayhook.WithGauges(relayhook.WithRound(ctx, round), p))
	p.ran.Store(true)
	err = p.rel.Run(rctx)
	if read != nil && read.Hits() > 0 {
		f.prefetchedChecks.Add(1)
	}
	if e := roundErr.Load(); e != nil && err == nil {
		err = *e
	}
	return claimed.Load(), err
}

// failed records t's error and backs it off alone: its waits double from
// MinProbe up to MaxBackoff.
func (f *Fleet) failed(t *tenant, err error, now time.Time) {
	t.fails++
	if t.fails == 1 || errors.Is(err, relay.ErrSchemaOutdated) {
		f.log.Warn("fleet: tenant failing; backing off", "tenant", t.def.ID, "err", err)
	}
	t.err, t.failedAt = err, now
	t.st, t.rewake = failing, false
	back := f.cfg.MinProbe << min(t.fails-1, 20)
	f.schedule(t, now.Add(min(back, f.cfg.MaxBackoff)))
	f.closePool(t) // its pool (if the fleet's own) and relay made again at the next try, the schema checked again
}

// recovered clears t's failure.
func (f *Fleet) recovered(t *tenant) {
	if t.fails > 0 {
		f.log.Info("fleet: tenant recovered", "tenant", t.def.ID, "after_failures", t.fails)
	}
	t.fails, t.err = 0, nil
}

// shutdown stops every run, waits for them and the probes, and closes the
// pools the fleet opened.
func (f *Fleet) shutdown() {
	f.mu.Lock()
	for _, t := range f.tenants {
		if t.cancel != nil {
			t.cancel()
		}
	}
	f.queue = nil
	f.mu.Unlock()
	f.wg.Wait()
	f.mu.Lock()
	for _, t := range f.tenants {
		f.closePool(t)
		t.st = idle
		f.schedule(t, time.Time{})
	}
	f.mu.Unlock()
	f.unobserve()
	f.closeProbeConns()
}

// open returns t's pool, opening it (Tenant.Open) when it is closed, with
// its relay.
func (f *Fleet) open(ctx context.Context, t *tenant) (*pool, error) {
	f.mu.Lock()
	p := t.pool
	f.mu.Unlock()
	if p != nil {
		p.fill(f.cfg.ConnsPerTenant)
		return p, nil
	}
	db := t.def.DB
	if db == nil {
		var err error
		if db, err = t.def.Open(ctx); err != nil {
			return nil, fmt.Errorf("open: %w", err)
		}
	}
	p, err := f.newPool(t, db)
	if err != nil {
		if t.def.Open != nil {
			closeDB(db)
		}
		return nil, err
	}
	f.mu.Lock()
	t.pool = p
	f.mu.Unlock()
	p.fill(f.cfg.ConnsPerTenant)
	return p, nil
}

// newPool makes t's pool of db: its relay, and its probe.
func (f *Fleet) newPool(t *tenant, db *gorm.DB) (*pool, error) {
	cfg := f.cfg.Relay
	if t.def.Table != "" {
		cfg.Table = t.def.Table
	}
	cfg.Tenant = t.def.ID
	f.mu.Lock()
	cfg.TenantMetrics = t.labelled
	f.mu.Unlock()
	rel, err := relay.New(db, f.pub, cfg)
	if err != nil {
		return nil, err
	}
	conn, err := drivers.Open(db, cfg.Table)
	if err != nil {
		return nil, err
	}
	return &pool{db: db, sql: conn.DB, own: t.def.Open != nil, rel: rel, hb: conn.Driver.Heartbeats(conn.Table),
		table: conn.Table, drv: conn.Driver, labelled: cfg.TenantMetrics}, nil
}

// closePool closes t's pool if the fleet opened it, and forgets it. Where
// its relay's gauges were registered (Keep), Run's next turn unregisters
// them, then closes the pool (unobserve), so that no collection reads a
// closed pool meanwhile.
func (f *Fleet) closePool(t *tenant) {
	p := t.pool
	if p == nil {
		return
	}
	t.pool = nil
	if u := p.release(); u != nil {
		f.unobs = append(f.unobs, func() {
			u()
			if p.own {
				closeDB(p.db)
			}
		})
		f.poke()
		return
	}
	if p.own {
		closeDB(p.db)
	}
}

// unobserve unregisters the gauges of the pools closePool let go, and closes
// them, outside the fleet's lock: an unregistration waits for a collection
// in flight, whose reads of a tenant's figures may take seconds.
func (f *Fleet) unobserve() {
	f.mu.Lock()
	us := f.unobs
	f.unobs = nil
	f.mu.Unlock()
	for _, u := range us {
		u()
	}
}

func closeDB(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		_ = s.Close()
	}
}
