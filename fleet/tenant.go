package fleet

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/relay"
)

// state is where a tenant is in the fleet's cycle: idle until its probe is
// due, probing, queued for a place once its probe found work (or it was
// woken), active while its relay runs, failing while it backs off, or
// elsewhere when another member serves it.
type state int

const (
	idle state = iota
	probing
	queued
	active
	failing
	elsewhere
)

var stateNames = [...]string{"idle", "probing", "queued", "active", "failing", "elsewhere"}

func (s state) String() string { return stateNames[s] }

// stopReason is why the fleet stopped an active tenant's relay.
type stopReason int

const (
	stopNone    stopReason = iota
	stopTurn               // others wait: it queues behind them
	stopMoved              // another member serves it now
	stopRemoved            // Config.Tenants no longer lists it
)

// tenant is the fleet's state of one tenant; the fleet's mutex guards it.
type tenant struct {
	def      Tenant
	pool     *pool // nil while closed
	st       state
	next     time.Time     // its next probe, idle or failing
	every    time.Duration // the wait before its next probe, idle
	since    time.Time     // active since
	worked   time.Time     // when a run of it last claimed events
	cancel   context.CancelFunc
	stopping stopReason
	removed  bool
	fails    int
	err      error
	failedAt time.Time
	labelled bool      // its relay's metrics carry its tenant (Config.TenantMetrics)
	rewake   bool      // woken while probed or relayed: queue it when that ends
	alone    bool      // probed alone through its pool, not on the probe connection: see slowProbe
	claimed  int64     // events its runs claimed since it was last probed with the others (aloneAfter)
	cleanAt  time.Time // when a probe next runs its relay's Cleanup (Relay.Retention)
}

// stop ends t's run for why.
func (t *tenant) stop(why stopReason) {
	if t.stopping == stopNone {
		t.stopping = why
	}
	if t.cancel != nil {
		t.cancel()
	}
}

// pool is a tenant's database as the fleet uses it: its relay and its
// probe's statement.
type pool struct {
	db    *gorm.DB
	sql   *sql.DB
	own   bool // opened through Tenant.Open: capped, shed when idle, closed
	rel   *relay.Relay
	hb    store.Heartbeats
	table ident.Table  // the relay's outbox, for its schema's lookups (prefetch)
	drv   store.Driver // its database's

	// The catalog read of the pool's relay's first run, made at the probe
	// that found it due with the others of its shared pool (prefetchSchemas).
	ran        atomic.Bool                        // the relay has run: it checked its schema
	prefetched atomic.Pointer[migrate.Prefetched] // nil: none, or taken by the run

	once sync.Once

	labelled  bool // the relay's metrics carry its tenant: it has outbox gauges to keep
	gmu       sync.Mutex
	unobserve func() // unregisters the relay's outbox gauges (Keep); nil: not registered
	closed    bool   // the fleet let the pool go: Keep registers nothing
}

// Keep registers the outbox gauges of the pool's relay at its first run and
// keeps them, between runs too, until the fleet lets the pool go (release):
// a labelled tenant's figures stay observed while it is idle
// (relayhook.Gauges). An unlabelled tenant's relay has none.
func (p *pool) Keep(register func() (unregister func())) {
	p.gmu.Lock()
	defer p.gmu.Unlock()
	if p.labelled && p.unobserve == nil && !p.closed {
		p.unobserve = register()
	}
}

// release ends Keep and returns the function that unregisters the gauges, if
// any, for the caller to call outside the fleet's lock (unregistering waits
// for a collection in flight).
func (p *pool) release() func() {
	p.gmu.Lock()
	defer p.gmu.Unlock()
	p.closed = true
	u := p.unobserve
	p.unobserve = nil
	return u
}

// takePrefetched returns ctx carrying the catalog read made for the pool's
// relay's first run, if there is one (it answers for migrate.PrefetchAge),
// with the run's view of it, to count its use (nil: none), and forgets it.
func (p *pool) takePrefetched(ctx context.Context) (context.Context, *migrate.Prefetched) {
	pr := p.prefetched.Swap(nil)
	if pr == nil {
		return ctx, nil
	}
	v := pr.View()
	return migrate.WithPrefetched(ctx, v), v
}

// fill lets an own pool keep up to n connections while it is used.
func (p *pool) fill(n int) {
	if !p.own {
		return
	}
	p.once.Do(func() { p.sql.SetMaxOpenConns(n) })
	p.sql.SetMaxIdleConns(n)
}

// shed closes an own pool's idle connections: an idle tenant holds none.
func (p *pool) shed() {
	if p.own {
		p.sql.SetMaxIdleConns(0)
	}
}

// budget is the fleet's connections: a weighted semaphore.
type budget struct {
	mu   sync.Mutex
	max  int
	free int
	wait chan struct{} // closed when some are released
}

func newBudget(n int) *budget { return &budget{max: n, free: n, wait: make(chan struct{})} }

// used is how many are taken.
func (b *budget) used() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.max - b.free
}

// try takes n connections if they are free.
func (b *budget) try(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.free < n {
		return false
	}
	b.free -= n
	return true
}

// acquire takes n connections, waiting until they are free or ctx ends.
func (b *budget) acquire(ctx context.Context, n int) error {
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			return nil
		}
		w := b.wait
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w:
		}
	}
}

// release gives n connections back.
func (b *budget) release(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.free += n
	close(b.wait)
	b.wait = make(chan struct{})
}
