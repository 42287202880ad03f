package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/fleet"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type (
	Account   = testkit.Account
	Deposited = testkit.Deposited
)

// world is one test's tenants on one dialect: each a database of its own
// (opened on demand through Dial, the pools watched) or, with shared, a
// schema (PostgreSQL) or database (MySQL) read through one shared pool.
type world struct {
	t       *testing.T
	d       testkit.Dialect
	writers map[string]*gorm.DB // each tenant's application handle, with the outbox hook
	defs    map[string]fleet.Tenant
	pools   *pools
	shared  *gorm.DB
	down    sync.Map // tenant id -> error its Open fails with
	pub     *recorder
	notify  func(id string) func() // each writer's outboxhook.Config.Notify, when set
}

func newWorld(t *testing.T, d testkit.Dialect) *world {
	return &world{t: t, d: d, writers: map[string]*gorm.DB{}, defs: map[string]fleet.Tenant{},
		pools: &pools{}, pub: &recorder{}}
}

// add makes tenant id a database of its own, opened on demand.
func (w *world) add(id string) {
	w.t.Helper()
	dsn := w.d.NewDSN(w.t)
	w.writer(id, dsn)
	w.defs[id] = fleet.Tenant{ID: id, Open: func(context.Context) (*gorm.DB, error) {
		if err, ok := w.down.Load(id); ok {
			return nil, err.(error)
		}
		db, err := w.d.Dial(dsn)
		if err == nil {
			w.pools.add(db)
		}
		return db, err
	}}
}

// addShared makes tenant id a schema (a database on MySQL) read through
// the world's one shared pool, where the dialect has more than one.
func (w *world) addShared(id string) bool {
	w.t.Helper()
	var schema string
	switch w.d.Name {
	case "postgres":
		var dsn string
		schema, dsn = pgtest.Schema(w.t)
		w.writer(id, dsn)
		if w.shared == nil {
			w.shared = w.d.Open(w.t, pgtest.DSN(), nil)
		}
	case "mysql":
		dsn := w.d.NewDSN(w.t)
		w.writer(id, dsn)
		schema = dsn[strings.LastIndexByte(dsn[:strings.IndexByte(dsn, '?')], '/')+1 : strings.IndexByte(dsn, '?')]
		if w.shared == nil {
			w.shared = w.d.Open(w.t, dsn, nil)
		}
	default:
		return false
	}
	w.defs[id] = fleet.Tenant{ID: id, DB: w.shared, Table: schema + ".outbox_messages"}
	return true
}

func (w *world) writer(id, dsn string) {
	w.t.Helper()
	db := w.d.Open(w.t, dsn, nil)
	var cfg outboxhook.Config
	if w.notify != nil {
		cfg.Notify = w.notify(id)
	}
	testkit.Must(w.t, db.Use(outboxhook.New(cfg)))
	testkit.Must(w.t, db.AutoMigrate(&Account{}))
	w.writers[id] = db
}

// list is a Config.Tenants of the world's tenants, those in only when set.
func (w *world) list(only ...string) func(context.Context) ([]fleet.Tenant, error) {
	return func(context.Context) ([]fleet.Tenant, error) {
		var out []fleet.Tenant
		for id, def := range w.defs {
			if len(only) == 0 || slices.Contains(only, id) {
				out = append(out, def)
			}
		}
		return out, nil
	}
}

// write commits accounts accounts of k deposits each for tenant id, each
// account in its own transaction.
func (w *world) write(id string, accounts, k int) {
	w.t.Helper()
	for range accounts {
		a := &Account{ID: uuid.New()}
		for i := range k {
			a.Record(Deposited{AccountID: a.ID, Seq: i})
		}
		testkit.Must(w.t, w.writers[id].Create(a).Error)
	}
}

// start runs a fleet of cfg on the world's publisher until the test ends,
// calling before on it first.
func (w *world) start(cfg fleet.Config, before ...func(*fleet.Fleet)) *fleet.Fleet {
	w.t.Helper()
	if cfg.Tenants == nil {
		cfg.Tenants = w.list()
	}
	if cfg.Logger == nil {
		cfg.Logger = testkit.Quiet()
	}
	cfg.Relay.Logger = cfg.Logger
	if cfg.Relay.PollInterval == 0 {
		cfg.Relay.PollInterval = 50 * time.Millisecond
	}
	if cfg.MaxConns == 0 { // the tests run side by side: the server's connections are shared
		cfg.MaxConns = 10
	}
	f, err := fleet.New(w.pub, cfg)
	testkit.Must(w.t, err)
	for _, fn := range before {
		fn(f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	w.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("fleet.Run: %v", err)
		}
	})
	return f
}

// wait waits until the recorder has n messages of tenant id.
func (w *world) wait(id string, n int) {
	w.t.Helper()
	testkit.Eventually(w.t, 30*time.Second, fmt.Sprintf("%d events of %s", n, id), func() bool {
		return w.pub.count(id) >= n
	})
}

// recorder is a publisher that keeps each message's tenant, account and
// deposit number.
type recorder struct {
	mu    sync.Mutex
	got   []published
	delay atomic.Int64 // nanoseconds each call of tenant "hot" takes
}

type published struct {
	tenant  string
	account string
	seq     int
	at      time.Time
}

func (r *recorder) Publish(_ string, msgs ...*message.Message) error {
	var out []published
	for _, m := range msgs {
		tenant := m.Metadata.Get(events.MetaTenant)
		if tenant == "hot" {
			time.Sleep(time.Duration(r.delay.Load()))
		}
		env, err := events.ParseEnvelope(m.UUID, m.Metadata, m.Payload)
		if err != nil {
			return err
		}
		var d Deposited
		if err := json.Unmarshal(env.Payload, &d); err != nil {
			return err
		}
		out = append(out, published{tenant: tenant, account: env.AggregateID, seq: d.Seq, at: time.Now()})
	}
	r.mu.Lock()
	r.got = append(r.got, out...)
	r.mu.Unlock()
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) count(tenant string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.got {
		if p.tenant == tenant {
			n++
		}
	}
	return n
}

// byAccount is each account's deposit numbers of tenant, in publish order.
func (r *recorder) byAccount(tenant string) map[string][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]int{}
	for _, p := range r.got {
		if p.tenant == tenant {
			out[p.account] = append(out[p.account], p.seq)
		}
	}
	return out
}

func (r *recorder) first(tenant string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.got {
		if p.tenant == tenant {
			return p.at
		}
	}
	return time.Time{}
}

func (r *recorder) last(tenant string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var at time.Time
	for _, p := range r.got {
		if p.tenant == tenant {
			at = p.at
		}
	}
	return at
}

// pools are the pools the tenants' Open made, to count their connections.
type pools struct {
	mu  sync.Mutex
	dbs []*gorm.DB
}

func (p *pools) add(db *gorm.DB) {
	p.mu.Lock()
	p.dbs = append(p.dbs, db)
	p.mu.Unlock()
}

// open is the connections open in them all now (closed pools count none).
func (p *pools) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, db := range p.dbs {
		if s, err := db.DB(); err == nil {
			n += s.Stats().OpenConnections
		}
	}
	return n
}

func (p *pools) made() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.dbs)
}

// status is the fleet's status of tenant id.
func status(f *fleet.Fleet, id string) (fleet.TenantStatus, bool) {
	for _, s := range f.Status() {
		if s.ID == id {
			return s, true
		}
	}
	return fleet.TenantStatus{}, false
}
