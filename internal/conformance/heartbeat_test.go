package conformance

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// TestInstanceRowsPruned checks, on every database, that the rows of the
// instance table (<outbox>_relays) of relays gone for longer than the prune
// age are deleted and the others kept: by the driver's Prune, whose
// statement reads the age in the unit it is given, and by a relay of either
// mode at start (a relay killed leaves its row behind, whatever its mode).
func TestInstanceRowsPruned(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, dl testkit.Dialect) {
		t.Run("Prune", func(t *testing.T) {
			t.Parallel()
			e := newInstancesEnv(t, dl)
			e.seen("stale", 2*time.Hour)
			e.seen("recent", 30*time.Minute)
			e.seen("now", 0)
			must(t, e.drv.Heartbeats(e.table).Prune(context.Background(), e.sqlDB, time.Hour))
			if got, want := e.instances(), []string{"now", "recent"}; !slices.Equal(got, want) {
				t.Fatalf("instances after Prune(1h) of rows seen 2h, 30m and 0s ago: %v, want %v", got, want)
			}
		})
		for _, ordered := range []bool{false, true} {
			t.Run(modeName(ordered), func(t *testing.T) {
				t.Parallel()
				e := newInstancesEnv(t, dl)
				// A day is the prune age (relay's heartbeatKeep).
				e.seen("crashed", 25*time.Hour)
				e.seen("recent", 23*time.Hour)
				gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
				r := e.relay(nil, gc, relay.Config{Ordered: ordered, InstanceID: "live", PollInterval: 20 * time.Millisecond,
					DisableListen: true, LeaseDuration: 3 * time.Second, PublishTimeout: time.Second})
				_, stop := e.run(r)
				defer stop()
				var got []string
				deadline := time.Now().Add(10 * time.Second)
				for {
					got = e.instances()
					if slices.Contains(got, "live") && !slices.Contains(got, "crashed") {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("instances 10 s after the %s relay started: %v; want the row seen 25 h ago pruned", modeName(ordered), got)
					}
					time.Sleep(50 * time.Millisecond)
				}
				if !slices.Contains(got, "recent") {
					t.Fatalf("instances: %v; the row seen 23 h ago, within the prune age, is gone", got)
				}
			})
		}
	})
}

// instancesEnv is a relay test's world with the relay's tables made.
type instancesEnv struct {
	*relayEnv
	drv   store.Driver
	table ident.Table
	sqlDB store.DB
}

func newInstancesEnv(t *testing.T, dl testkit.Dialect) *instancesEnv {
	t.Helper()
	e := &instancesEnv{relayEnv: newRelayEnv(t, dl), table: ident.MustTable(store.DefaultOutbox)}
	drv, err := drivers.For(e.db)
	must(t, err)
	sqlDB, err := e.db.DB()
	must(t, err)
	e.drv, e.sqlDB = drv, sqlDB
	must(t, drv.Relay(e.table).Create(context.Background(), sqlDB, store.RelayCreateParams{Ordered: true}))
	return e
}

// seen writes instance's row, seen ago before the database's now.
func (e *instancesEnv) seen(instance string, ago time.Duration) {
	e.t.Helper()
	at, arg := e.d.SQL.Ago(ago)
	must(e.t, e.db.Exec(`INSERT INTO `+e.drv.Quote(e.table.Derived("_relays"))+` (instance, seen_at) VALUES (?, `+at+`)`, instance, arg).Error)
}

// instances returns the instance table's rows' instances, sorted.
func (e *instancesEnv) instances() []string {
	e.t.Helper()
	seen, err := e.drv.Heartbeats(e.table).Instances(context.Background(), e.sqlDB)
	must(e.t, err)
	out := make([]string, len(seen))
	for i, s := range seen {
		out[i] = s.Instance
	}
	slices.Sort(out)
	return out
}
