package drivertest

import (
	"slices"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

var leasesTests = []test{
	{"AcquireRenewRelease", testLeasesAcquireRenewRelease},
	{"ExpiredLeaseTakenOverUnderNewGeneration", testLeasesTakeOver},
	{"HeartbeatLiveLeave", testLeasesHeartbeat},
}

func parts(ls []store.Lease) []int {
	out := make([]int, len(ls))
	for i, l := range ls {
		out[i] = l.Partition
	}
	slices.Sort(out)
	return out
}

func gens(ls []store.Lease) map[int]int64 {
	out := make(map[int]int64, len(ls))
	for _, l := range ls {
		out[l.Partition] = l.Generation
	}
	return out
}

// Acquire takes up to n free partitions below partitions, each under a new
// generation, and never one another holds; Renew returns the holder's leases
// with the generations they keep; Release and ReleaseAll give partitions
// back, for the next Acquire under a newer generation. Seed is idempotent.
func testLeasesAcquireRenewRelease(t tb.TB, e *env) {
	ls := e.rel.Leases()
	must(t, ls.Seed(e.ctx, e.db, 4))
	must(t, ls.Seed(e.ctx, e.db, 4))
	a, err := ls.Acquire(e.ctx, e.db, store.AcquireParams{Instance: "a", Lease: time.Minute, Limit: 2, Partitions: 4})
	must(t, err)
	if len(a) != 2 {
		t.Fatalf("a acquired %v, want 2 partitions", a)
	}
	b, err := ls.Acquire(e.ctx, e.db, store.AcquireParams{Instance: "b", Lease: time.Minute, Limit: 10, Partitions: 3})
	must(t, err)
	for _, p := range parts(b) {
		if slices.Contains(parts(a), p) || p >= 3 {
			t.Fatalf("b acquired %v while a holds %v (of partitions below 3)", b, a)
		}
	}
	if got, err := ls.Acquire(e.ctx, e.db, store.AcquireParams{Instance: "c", Lease: time.Minute, Limit: 10, Partitions: 3}); err != nil || len(got) != 0 {
		t.Fatalf("c acquired %v, %v with every partition below 3 held", got, err)
	}

	renewed, err := ls.Renew(e.ctx, e.db, "a", time.Minute)
	must(t, err)
	if !maps(gens(renewed), gens(a)) {
		t.Fatalf("Renew = %v, want a's leases %v with their generations", renewed, a)
	}

	first := parts(a)[0]
	must(t, ls.Release(e.ctx, e.db, "a", []int{first}))
	must(t, ls.Release(e.ctx, e.db, "b", []int{first})) // not b's: nothing
	if got, _ := ls.Renew(e.ctx, e.db, "a", time.Minute); len(got) != 1 {
		t.Fatalf("a renewed %v after releasing one of two", got)
	}
	c, err := ls.Acquire(e.ctx, e.db, store.AcquireParams{Instance: "c", Lease: time.Minute, Limit: 10, Partitions: 4})
	must(t, err)
	cg := gens(c)
	if g, ok := cg[first]; !ok || g <= gens(a)[first] {
		t.Fatalf("c acquired %v; want partition %d under a generation above %d", c, first, gens(a)[first])
	}

	must(t, ls.ReleaseAll(e.ctx, e.db, "c"))
	if got, _ := ls.Renew(e.ctx, e.db, "c", time.Minute); len(got) != 0 {
		t.Fatalf("c renewed %v after ReleaseAll", got)
	}
}

func maps(a, b map[int]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A lease that ran out is not renewed, and another instance acquires the
// partition under a newer generation.
func testLeasesTakeOver(t tb.TB, e *env) {
	ls := e.rel.Leases()
	must(t, ls.Seed(e.ctx, e.db, 1))
	a, err := ls.Acquire(e.ctx, e.db, store.AcquireParams{Instance: "a", Lease: 20 * time.Millisecond, Limit: 1, Partitions: 1})
	must(t, err)
	if len(a) != 1 {
		t.Fatalf("a acquired %v", a)
	}
	time.Sleep(100 * time.Millisecond)
	if got, err := ls.Renew(e.ctx, e.db, "a", time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("Renew of a lease that ran out = %v, %v", got, err)
	}
	b, err := ls.Acquire(e.ctx, e.db, store.AcquireParams{Instance: "b", Lease: time.Minute, Limit: 1, Partitions: 1})
	must(t, err)
	if len(b) != 1 || b[0].Generation <= a[0].Generation {
		t.Fatalf("b acquired %v after a's %v ran out", b, a)
	}
}

// Live counts the instances whose heartbeat is within the window; Leave
// forgets one.
func testLeasesHeartbeat(t tb.TB, e *env) {
	ls := e.rel.Leases()
	for _, i := range []string{"a", "b", "a"} {
		must(t, ls.Heartbeat(e.ctx, e.db, i))
	}
	live := func() int {
		t.Helper()
		n, err := ls.Live(e.ctx, e.db, time.Minute)
		must(t, err)
		return n
	}
	if n := live(); n != 2 {
		t.Fatalf("Live = %d, want 2", n)
	}
	must(t, ls.Leave(e.ctx, e.db, "a"))
	if n := live(); n != 1 {
		t.Fatalf("Live after a left = %d, want 1", n)
	}
	at, arg := e.sql.Ago(time.Hour)
	e.exec(`UPDATE `+e.drv.Quote(e.table.Derived("_relays"))+` SET seen_at = `+at+` WHERE instance = 'b'`, arg)
	if n := live(); n != 0 {
		t.Fatalf("Live with b's heartbeat an hour old = %d, want 0", n)
	}
}
