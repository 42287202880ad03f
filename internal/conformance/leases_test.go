package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/testkit"
)

// The generation of the partition leases, the fencing token: a lease table
// made before it (the relay migration alone) gets the column from the relay's
// self-creation; every Acquire bumps a lease's generation and Renew keeps it.
// A mark fenced by a stale lease (the partition taken over, even by the same
// instance again) changes nothing and says so (store.ErrLeaseLost); fenced by
// the current one, it marks.
func testRelayLeaseGenerations(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	ctx := context.Background()
	drv, err := drivers.For(e.db)
	must(t, err)
	table := ident.MustTable("outbox_messages")
	st := drv.Relay(table)
	sqlDB, err := e.db.DB()
	must(t, err)
	objs, err := migrate.Objects(drv.Migrations(), "0002_relay.up.sql", store.DefaultOutbox, table, drv.Quote)
	must(t, err)
	for _, o := range objs {
		if strings.HasSuffix(string(o.Name.Name), "_leases") {
			_, err := sqlDB.ExecContext(ctx, o.SQL)
			must(t, err)
		}
	}
	const gen = `SELECT generation FROM outbox_messages_leases`
	if err := e.db.Exec(gen).Error; err == nil {
		t.Fatal("the lease table of migration 0002 has a generation already")
	}
	// Self-creation alters no table that was there: the relay refuses the
	// lease table at start, naming the migration, which adds the column.
	must(t, st.Create(ctx, sqlDB, store.RelayCreateParams{Ordered: true}))
	if err := st.Check(ctx, sqlDB, store.RelayCheckParams{Ordered: true}); !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), "0005_lease_generation") {
		t.Fatalf("the relay's check of a lease table without its generation: %v; want ErrSchemaOutdated naming 0005", err)
	}
	add, err := migrate.Objects(drv.Migrations(), "0005_lease_generation.up.sql", store.DefaultOutbox, table, drv.Quote)
	must(t, err)
	for _, o := range add {
		_, err := sqlDB.ExecContext(ctx, o.SQL)
		must(t, err)
	}
	must(t, e.db.Exec(gen).Error)
	must(t, st.Check(ctx, sqlDB, store.RelayCheckParams{Ordered: true}))
	must(t, st.Create(ctx, sqlDB, store.RelayCreateParams{Ordered: true})) // nothing left to do

	l := st.Leases()
	must(t, l.Seed(ctx, sqlDB, 4))
	all := []int{0, 1, 2, 3}
	acquire := func(who string, want int64) *store.Fence {
		t.Helper()
		got, err := l.Acquire(ctx, sqlDB, store.AcquireParams{Instance: who, Lease: time.Minute, Limit: 4, Partitions: 4})
		must(t, err)
		if len(got) != 4 {
			t.Fatalf("%s acquired %v, want the 4 partitions", who, got)
		}
		for _, g := range got {
			if g.Generation != want {
				t.Fatalf("%s acquired %v: want generation %d", who, got, want)
			}
		}
		return &store.Fence{Instance: who, Partitions: 4, Leases: got}
	}
	stale := acquire("a", 1)
	renewed, err := l.Renew(ctx, sqlDB, "a", time.Minute)
	must(t, err)
	if len(renewed) != 4 || renewed[0].Generation != 1 {
		t.Fatalf("renewed %v: want the 4 partitions, generation 1 kept", renewed)
	}
	e.write(4, 1)
	must(t, l.Release(ctx, sqlDB, "a", all))
	acquire("b", 2)
	must(t, l.Release(ctx, sqlDB, "b", all))
	current := acquire("a", 3) // the same instance again: a new generation

	// A batch claimed under fence: the first event marked failed (dead), the
	// others published (processed).
	var first string
	marks := func(fence *store.Fence) (failed, published error) {
		t.Helper()
		b, err := st.Claim(ctx, sqlDB, store.ClaimParams{Limit: 10, Keep: true,
			Ordered: &store.OrderedClaim{Partitions: 4, Owned: []int32{0, 1, 2, 3}, Fence: fence}})
		must(t, err)
		defer b.Close()
		claimed := b.Rows()
		if len(claimed) != 4 {
			t.Fatalf("claimed %d events, want 4", len(claimed))
		}
		first = claimed[0].ID
		ids := make([]string, 0, len(claimed)-1)
		for _, c := range claimed[1:] {
			ids = append(ids, c.ID)
		}
		_, failed = b.MarkFailed(ctx, []store.Failure{{ID: first, Err: "refused", Strike: true, Dead: true, Delay: time.Second}})
		published = b.MarkPublished(ctx, ids)
		must(t, b.Commit(ctx))
		return failed, published
	}
	if f, p := marks(stale); !errors.Is(f, store.ErrLeaseLost) || !errors.Is(p, store.ErrLeaseLost) {
		t.Fatalf("marks fenced by a stale lease: %v, %v; want store.ErrLeaseLost", f, p)
	}
	for _, r := range e.rows() {
		if !r.Pending() || r.Attempts != 0 || r.Strikes != 0 {
			t.Fatalf("event %s after marks fenced by a stale lease: processed %v, dead %v, attempts %d", r.ID, r.Processed, r.Dead, r.Attempts)
		}
	}
	if f, p := marks(current); f != nil || p != nil {
		t.Fatalf("marks fenced by the current lease: %v, %v", f, p)
	}
	for _, r := range e.rows() {
		if r.ID.String() == first {
			if !r.Dead || r.Attempts != 1 {
				t.Fatalf("event %s marked failed: dead %v, attempts %d", r.ID, r.Dead, r.Attempts)
			}
		} else if !r.Processed {
			t.Fatalf("event %s marked published is not processed", r.ID)
		}
	}
}
