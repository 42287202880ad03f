package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/fleet"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// One fleet relays every tenant, databases of their own and schemas of a
// shared one alike: each message carries its tenant, each account's events
// in order (ordered mode), nothing left pending.
func TestRelaysEveryTenant(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		for _, ordered := range []bool{false, true} {
			t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
				w := newWorld(t, d)
				var ids []string
				for i := range 4 {
					id := fmt.Sprintf("own%d", i)
					w.add(id)
					ids = append(ids, id)
				}
				for i := range 3 {
					if id := fmt.Sprintf("shared%d", i); w.addShared(id) {
						ids = append(ids, id)
					}
				}
				cfg := fleet.Config{}
				cfg.Relay.Ordered = ordered
				w.start(cfg)
				for _, id := range ids {
					w.write(id, 3, 4)
				}
				for _, id := range ids {
					w.wait(id, 12)
				}
				for _, id := range ids {
					for acc, seqs := range w.pub.byAccount(id) {
						if ordered && !slices.Equal(seqs, []int{0, 1, 2, 3}) {
							t.Errorf("tenant %s account %s published %v", id, acc, seqs)
						}
					}
					testkit.Eventually(t, 10*time.Second, "tenant "+id+" marked", func() bool {
						return testkit.Pending(t, w.writers[id]) == 0
					})
					if n := w.pub.count(id); n != 12 {
						t.Errorf("tenant %s: %d published, want 12", id, n)
					}
				}
			})
		}
	})
}

// The fleet's connections stay within MaxConns, whatever the number of
// tenants; once they are idle, the pools it opened hold none.
func TestConnectionsBounded(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		w := newWorld(t, d)
		const tenants, budget = 10, 7
		for i := range tenants {
			w.add(fmt.Sprintf("t%d", i))
		}
		stop := make(chan struct{})
		peak := make(chan int)
		go func() {
			top := 0
			for {
				select {
				case <-stop:
					peak <- top
					return
				default:
				}
				top = max(top, w.pools.open())
				time.Sleep(time.Millisecond)
			}
		}()
		w.start(fleet.Config{MaxConns: budget, ConnsPerTenant: 3, Probes: 1, IdleClose: 100 * time.Millisecond})
		for i := range tenants {
			w.write(fmt.Sprintf("t%d", i), 5, 3)
		}
		for i := range tenants {
			w.wait(fmt.Sprintf("t%d", i), 15)
		}
		testkit.Eventually(t, 10*time.Second, "idle tenants holding no connection", func() bool { return w.pools.open() == 0 })
		close(stop)
		if top := <-peak; top > budget {
			t.Errorf("the tenants' pools held %d connections at once, over the budget of %d", top, budget)
		} else {
			t.Logf("at most %d connections at once (budget %d), %d pools opened", top, budget, w.pools.made())
		}
	})
}

// A tenant whose database is down, or whose outbox table is gone, is shown
// failing with its error and backed off alone: every other tenant is
// published as before, and the failing ones are once fixed.
func TestFailuresIsolated(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		w := newWorld(t, d)
		for _, id := range []string{"ok1", "ok2", "down", "dropped"} {
			w.add(id)
		}
		failing := []string{"down", "dropped"}
		// Schemas of one shared pool, probed in one statement: one of them
		// gone fails that one alone.
		shared := w.addShared("shared-ok") && w.addShared("shared-dropped")
		if shared {
			testkit.Must(t, w.writers["shared-dropped"].Exec(`DROP TABLE outbox_messages`).Error)
			failing = append(failing, "shared-dropped")
		}
		down := errors.New("connection refused (test)")
		w.down.Store("down", down)
		testkit.Must(t, w.writers["dropped"].Exec(`DROP TABLE outbox_messages`).Error)
		f := w.start(fleet.Config{MinProbe: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
		w.write("ok1", 2, 2)
		w.write("ok2", 2, 2)
		w.wait("ok1", 4)
		w.wait("ok2", 4)
		if shared {
			w.write("shared-ok", 2, 2)
			w.wait("shared-ok", 4)
		}
		for _, id := range failing {
			testkit.Eventually(t, 10*time.Second, id+" shown failing", func() bool {
				s, _ := status(f, id)
				return s.State == "failing" && s.Err != nil && s.Failures > 1
			})
		}
		if s, _ := status(f, "down"); !errors.Is(s.Err, down) {
			t.Errorf("down fails with %v, want %v", s.Err, down)
		}
		if st := f.Status(); st[len(failing)-1].Failures == 0 || st[len(failing)].Failures != 0 {
			t.Errorf("Status does not list the failing tenants first: %+v", st)
		}
		// Fixed: the database is back, the table made again.
		w.down.Delete("down")
		w.write("down", 1, 3)
		r, err := relay.New(w.writers["dropped"], w.pub, relay.Config{Logger: testkit.Quiet()})
		testkit.Must(t, err)
		testkit.Must(t, r.Setup(t.Context()))
		w.write("dropped", 1, 3)
		w.wait("down", 3)
		w.wait("dropped", 3)
		for _, id := range []string{"down", "dropped"} {
			if s, _ := status(f, id); s.State == "failing" || s.Err != nil {
				t.Errorf("%s still failing after it was fixed: %+v", id, s)
			}
		}
	})
}

// A tenant burning a backlog through a slow publisher does not keep a cold
// tenant's new event waiting for it: with one place for both, the hot one
// gives its place up each Slice while the cold one waits, and the cold
// event goes out while the backlog is still being burnt.
func TestFairTurns(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		w := newWorld(t, d)
		w.add("hot")
		w.add("cold")
		w.write("hot", 40, 10)
		w.pub.delay.Store(int64(2 * time.Millisecond))
		cfg := fleet.Config{MaxConns: 4, ConnsPerTenant: 3, Probes: 1, Slice: 100 * time.Millisecond,
			MinProbe: 20 * time.Millisecond}
		cfg.Relay.BatchSize = 20
		w.start(cfg)
		w.wait("hot", 20)
		w.write("cold", 1, 1)
		w.wait("cold", 1)
		if n := w.pub.count("hot"); n >= 400 {
			t.Fatalf("the cold tenant's event went out only after the hot backlog (%d events)", n)
		}
		w.wait("hot", 400)
		t.Logf("the cold event went out %v before the hot backlog's last", w.pub.last("hot").Sub(w.pub.first("cold")))
	})
}

// Wake relays a tenant at once, without waiting for its next probe; a
// tenant added to the list since the last refresh too (its Wake refreshes).
func TestWake(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		w := newWorld(t, d)
		w.add("a")
		w.add("b")
		var withB atomic.Bool
		f := w.start(fleet.Config{MinProbe: time.Hour, MaxProbe: time.Hour, MaxBackoff: time.Hour, RefreshInterval: time.Hour,
			Tenants: func(ctx context.Context) ([]fleet.Tenant, error) {
				if withB.Load() {
					return w.list("a", "b")(ctx)
				}
				return w.list("a")(ctx)
			}})
		testkit.Eventually(t, 10*time.Second, "the first probe", func() bool {
			s, _ := status(f, "a")
			return s.State == "idle"
		})
		w.write("a", 1, 2)
		f.Wake("a")
		w.wait("a", 2)
		withB.Store(true)
		w.write("b", 1, 2)
		f.Wake("b")
		w.wait("b", 2)
		f.Wake("unknown") // a refresh, which finds no such tenant
		time.Sleep(50 * time.Millisecond)
		if len(f.Status()) != 2 {
			t.Errorf("Status = %+v, want a and b", f.Status())
		}
	})
}

// Listen: the writers of tenants on one server notify through a handle on
// one database (relay.Notifier.Tenant), and the fleet listening there
// relays the tenant a notification names at once, long before its next
// probe; the others stay idle. On a database without LISTEN/NOTIFY, New
// refuses Listen.
func TestListenWakesTenants(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		if d.Name != "postgres" {
			db := d.Open(t, d.NewDSN(t), nil)
			_, err := fleet.New(&recorder{}, fleet.Config{Tenants: newWorld(t, d).list(), Listen: []*gorm.DB{db}})
			if !errors.Is(err, relay.ErrNoNotify) {
				t.Fatalf("New with Listen on %s: %v, want relay.ErrNoNotify", d.Name, err)
			}
			return
		}
		w := newWorld(t, d)
		notifyDB := d.Open(t, pgtest.DSN(), nil)
		channel := pgtest.Name("herald_fleet_") // the tests share the database
		n, err := relay.NewNotifier(notifyDB, relay.NotifierConfig{Channel: channel, Logger: testkit.Quiet()})
		testkit.Must(t, err)
		testkit.Run(t, n.Run)
		w.notify = n.Tenant
		w.addShared("a")
		w.addShared("b")
		f := w.start(fleet.Config{MinProbe: time.Hour, MaxProbe: time.Hour, MaxBackoff: time.Hour, RefreshInterval: time.Hour,
			Listen: []*gorm.DB{notifyDB}, Channel: channel})
		testkit.Eventually(t, 10*time.Second, "the first probes", func() bool {
			a, _ := status(f, "a")
			b, _ := status(f, "b")
			return a.State == "idle" && b.State == "idle"
		})
		testkit.Eventually(t, 10*time.Second, "the fleet's LISTEN", func() bool {
			var n int
			err := notifyDB.Raw(`SELECT count(*) FROM pg_stat_activity WHERE query = ?`, `LISTEN "`+channel+`"`).Row().Scan(&n)
			return err == nil && n == 1
		})
		w.write("a", 1, 2)
		w.wait("a", 2)
		if n := w.pub.count("b"); n != 0 {
			t.Fatalf("b: %d messages, want none", n)
		}
		w.write("b", 2, 1)
		w.wait("b", 2)
	})
}

// Tenants added to the list while the fleet runs are relayed; those taken
// off it are stopped, forgotten, and their pools closed.
func TestTenantsChange(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		w := newWorld(t, d)
		for _, id := range []string{"a", "b", "c"} {
			w.add(id)
		}
		var list atomic.Pointer[[]string]
		list.Store(&[]string{"a", "b"})
		f := w.start(fleet.Config{RefreshInterval: 50 * time.Millisecond, Tenants: func(ctx context.Context) ([]fleet.Tenant, error) {
			return w.list(*list.Load()...)(ctx)
		}})
		w.write("a", 1, 1)
		w.wait("a", 1)
		if _, ok := status(f, "c"); ok {
			t.Fatal("c is listed before it was added")
		}
		list.Store(&[]string{"b", "c"})
		w.write("c", 1, 2)
		w.wait("c", 2)
		testkit.Eventually(t, 10*time.Second, "a forgotten, its pool closed", func() bool {
			_, ok := status(f, "a")
			return !ok && w.pools.open() == 0
		})
		w.write("a", 1, 1)
		time.Sleep(300 * time.Millisecond)
		if n := w.pub.count("a"); n != 1 {
			t.Errorf("a, taken off the list, was relayed: %d events", n)
		}
	})
}

// Fleet processes sharing a control database split the tenants between
// them; when one stops, the others take its tenants over within the TTL,
// and every event is published.
func TestMembersShareTenants(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		w := newWorld(t, d)
		var ids []string
		for i := range 8 {
			ids = append(ids, fmt.Sprintf("t%d", i))
			w.add(ids[i])
		}
		control := d.Open(t, d.NewDSN(t), nil)
		// Named members: with the default names (a random part) one member
		// hashes all 8 tenants to itself in 1 run of 128.
		cfg := fleet.Config{Members: control, MemberTTL: 600 * time.Millisecond, MinProbe: 20 * time.Millisecond, MaxConns: 10,
			Relay: relay.Config{InstanceID: "member-a"}}
		a := w.start(cfg)
		ctxB, stopB := context.WithCancel(context.Background())
		cfgB := cfg
		cfgB.Logger, cfgB.Relay.Logger, cfgB.Relay.PollInterval = testkit.Quiet(), testkit.Quiet(), 50*time.Millisecond
		cfgB.Relay.InstanceID = "member-b"
		cfgB.Tenants = w.list()
		b, err := fleet.New(w.pub, cfgB)
		testkit.Must(t, err)
		doneB := make(chan struct{})
		var errB error
		go func() { defer close(doneB); errB = b.Run(ctxB) }()
		t.Cleanup(func() { stopB(); <-doneB })
		served := func(f *fleet.Fleet) (here, there int) {
			for _, s := range f.Status() {
				if s.State == "elsewhere" {
					there++
				} else {
					here++
				}
			}
			return
		}
		testkit.Eventually(t, 10*time.Second, "the tenants split", func() bool {
			ha, ta := served(a)
			hb, tb := served(b)
			return ha > 0 && hb > 0 && ha == tb && hb == ta && ha+hb == len(ids)
		})
		for _, s := range a.Status() {
			want := a.Instance()
			if s.State == "elsewhere" {
				want = b.Instance()
			}
			if s.Member != want {
				t.Errorf("tenant %s (%s) served by %q, want %q", s.ID, s.State, s.Member, want)
			}
		}
		for _, id := range ids {
			w.write(id, 2, 2)
		}
		for _, id := range ids {
			w.wait(id, 4)
		}
		stopB()
		<-doneB
		testkit.Must(t, errB)
		testkit.Eventually(t, 10*time.Second, "a serving every tenant", func() bool {
			_, there := served(a)
			return there == 0
		})
		for _, id := range ids {
			w.write(id, 1, 2)
		}
		for _, id := range ids {
			w.wait(id, 6)
		}
	})
}

// The probes of a shared pool's tenants run on one connection the fleet
// keeps from that pool between probes (a server process that read their
// tables before); Run gives it back when it ends.
func TestSharedPoolProbeConnection(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		w := newWorld(t, d)
		if !w.addShared("a") {
			t.Skip("no shared pool on this dialect")
		}
		w.addShared("b")
		pool, err := w.shared.DB()
		testkit.Must(t, err)
		f, err := fleet.New(w.pub, fleet.Config{Tenants: w.list(), MinProbe: 10 * time.Millisecond, MaxProbe: 20 * time.Millisecond,
			MaxConns: 10, Logger: testkit.Quiet(), Relay: relay.Config{PollInterval: 50 * time.Millisecond, Logger: testkit.Quiet()}})
		testkit.Must(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		ended := false
		defer func() {
			if !ended {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}
		}()
		w.write("a", 1, 2)
		w.wait("a", 2)
		w.write("b", 1, 2)
		w.wait("b", 2)
		// Idle once their runs ended, probed every 20ms at most: one
		// connection in use all along.
		testkit.Eventually(t, 5*time.Second, "the runs' connections given back", func() bool { return pool.Stats().InUse == 1 })
		lowest, highest := 99, 0
		for range 50 {
			n := pool.Stats().InUse
			lowest, highest = min(lowest, n), max(highest, n)
			time.Sleep(10 * time.Millisecond)
		}
		if lowest != 1 || highest != 1 {
			t.Errorf("idle tenants of a shared pool: %d to %d connections of the pool in use, want the probe connection alone, held", lowest, highest)
		}
		cancel()
		ended = true
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if n := pool.Stats().InUse; n != 0 {
			t.Errorf("after Run: %d connections of the shared pool in use, want 0", n)
		}
	})
}

// A tenant of a shared pool whose probe does not come back (its outbox
// locked by another session; or, as after a burnt backlog, reading a
// million dead index entries) holds up no other tenant's: the probe on the
// probe connection is given up and each tenant probed alone through the
// pool. Its own events go out once its outbox is free again.
func TestSlowProbeHoldsUpNoOther(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		w := newWorld(t, d)
		for _, id := range []string{"slow", "a", "b"} {
			if !w.addShared(id) {
				t.Skip("no shared pool on this dialect")
			}
			w.write(id, 1, 2)
		}
		sqlDB, err := w.writers["slow"].DB()
		testkit.Must(t, err)
		lock, err := sqlDB.Conn(t.Context())
		testkit.Must(t, err)
		defer lock.Close()
		take, free := []string{"BEGIN", "LOCK TABLE outbox_messages IN ACCESS EXCLUSIVE MODE"}, "ROLLBACK"
		if d.Name == "mysql" {
			take, free = []string{"LOCK TABLES outbox_messages WRITE"}, "UNLOCK TABLES"
		}
		for _, q := range take {
			_, err := lock.ExecContext(t.Context(), q)
			testkit.Must(t, err)
		}
		f := w.start(fleet.Config{MinProbe: 10 * time.Millisecond, MaxProbe: 20 * time.Millisecond}, func(f *fleet.Fleet) { fleet.SetProbeTimeout(f, 3*time.Second) })
		w.wait("a", 2)
		w.wait("b", 2)
		w.write("a", 1, 2)
		w.wait("a", 4)
		if n := w.pub.count("slow"); n != 0 {
			t.Fatalf("%d events of the locked tenant published", n)
		}
		// Its probe alone, through the pool, given up in turn: failing.
		testkit.Eventually(t, 30*time.Second, "the locked tenant failing", func() bool {
			for _, st := range f.Status() {
				if st.ID == "slow" && st.State == "failing" && errors.Is(st.Err, context.DeadlineExceeded) {
					return true
				}
			}
			return false
		})
		_, err = lock.ExecContext(t.Context(), free)
		testkit.Must(t, err)
		w.wait("slow", 2)
	})
}

// The tenants of a shared pool that a probe finds due, whose relays have
// not run, check their schema at their first run from one catalog read made
// with that probe (on its connection), not each with a statement of its
// own; all their events are published.
func TestSharedPoolPrefetchesSchemas(t *testing.T) {
	t.Parallel()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		w := newWorld(t, d)
		ids := []string{"a", "b", "c"}
		for _, id := range ids {
			if !w.addShared(id) {
				t.Skip("no shared pool on this dialect")
			}
			// Migrated as a service's deployment does: the relay's objects
			// too (a relay's first run would make them, reading the
			// catalog again).
			r, err := relay.New(w.shared, w.pub, relay.Config{Table: w.defs[id].Table, Logger: testkit.Quiet()})
			testkit.Must(t, err)
			testkit.Must(t, r.Setup(t.Context()))
			w.write(id, 2, 2)
		}
		f := w.start(fleet.Config{MinProbe: 10 * time.Millisecond, MaxProbe: 20 * time.Millisecond})
		for _, id := range ids {
			w.wait(id, 4)
		}
		// Counted when a run ends, after its events went out.
		testkit.Eventually(t, 10*time.Second, "the first runs' ends", func() bool { return fleet.PrefetchedChecks(f) >= int64(len(ids)) })
		if n := fleet.PrefetchedChecks(f); n != int64(len(ids)) {
			t.Fatalf("%d first runs checked their schema from the probe's catalog read, want %d", n, len(ids))
		}
	})
}
