package walrelay_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/walrelay"
)

// Two relays on one slot, each with Config.Parked: only the one streaming
// runs the table relay of the parked events, its publishes confirming their
// failures, so plain refusals (not relay.ErrRejected) die whichever relay
// streams; after a take-over the second's table relay does the same. Each
// aggregate's events are published in order, the refused ones missing, and
// nothing else dies.
func TestParkedRelayRunsWhereTheSlotStreams(t *testing.T) {
	db, rs := setupAggs(t)
	gc := ordered()
	c := collect(t, gc)
	pub := &plainRefuser{pub: gc}
	parked := &relay.Config{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, Retention: time.Hour, LeaseDuration: 3 * time.Second, PublishTimeout: time.Second}
	newRelay := func() *walrelay.Relay {
		return rs.with(t, pub, walrelay.Config{Ordered: true, Parked: parked})
	}
	walsender := func() (pid int) {
		if err := db.Raw(`SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = ?`, rs.slot).Scan(&pid).Error; err != nil {
			t.Errorf("read the slot: %v", err)
		}
		return pid
	}
	stop1 := start(t, newRelay())
	waitFor(t, "the first relay streaming", func() bool { return walsender() != 0 })
	first := walsender()
	start(t, newRelay()) // waits for the slot

	// Live traffic on aggregates of their own while the refused ones are
	// retried: the streaming relay's publishes confirm their failures.
	writeCtx, stopWriting := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stopWriting(); wg.Wait() })
	wg.Go(func() {
		for n := 0; writeCtx.Err() == nil; n++ {
			save(t, db, fmt.Sprintf("live%d", n%4), n/4, false)
			time.Sleep(5 * time.Millisecond)
		}
	})
	poisoned := map[string]bool{"a1": true, "a4": true}
	writeAggs(t, db, 2, 6, 0, 10, poisoned)
	deadPoisons := func(want int) func() bool {
		return func() bool {
			return count(t, db, `SELECT count(*) FROM outbox_messages WHERE type = 'poison' AND dead_at IS NOT NULL`) == want
		}
	}
	waitFor(t, "the refused events dead under the first relay", deadPoisons(2))

	stop1() // the second takes the slot over, and runs the parked relay
	waitFor(t, "the second relay streaming", func() bool { return walsender() != 0 && walsender() != first })
	for n := range 10 {
		for _, agg := range []string{"b0", "b1", "b2"} {
			save(t, db, agg, n, agg == "b1" && n == 3)
		}
	}
	waitFor(t, "the refused event dead under the second relay", deadPoisons(3))
	stopWriting()
	wg.Wait()
	drainedOnlyRefusedDead(t, db)
	checkDeliveries(t, db, c, map[string]bool{"a1": true, "a4": true, "b1": true})
}

// checkDeliveries checks that each aggregate's events were published in
// order, the refused event (3) of those in poisoned missing, and that every
// other event of a0..a5 and b0..b2 (0..9) was published.
func checkDeliveries(t *testing.T, db *gorm.DB, c *collector, poisoned map[string]bool) {
	t.Helper()
	aggs := []string{"a0", "a1", "a2", "a3", "a4", "a5", "b0", "b1", "b2"}
	want := func(agg string) []int {
		if poisoned[agg] {
			return seq(0, 10, 3)
		}
		return seq(0, 10)
	}
	// The table drained says nothing of the events the WAL relay streams
	// (and the subscriber gets them after Publish returned): wait for them,
	// then judge.
	complete := func() bool {
		got := byAgg(c.deliveries())
		for _, agg := range aggs {
			if !slices.Equal(slices.Compact(slices.Sorted(slices.Values(got[agg]))), want(agg)) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); !complete() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	got := byAgg(c.deliveries())
	for agg, ns := range got {
		if !slices.IsSorted(ns) {
			t.Errorf("published of %s out of order: %v", agg, ns)
			logRows(t, db, agg)
		}
	}
	for _, agg := range aggs {
		if ns := slices.Compact(slices.Clone(got[agg])); !slices.Equal(ns, want(agg)) {
			t.Errorf("published of %s: %v, want %v", agg, ns, want(agg))
		}
	}
}

// Parked must agree with the relay's Table and Ordered and leave its
// Confirmer to the relay; what it leaves unset it takes from them.
func TestParkedConfig(t *testing.T) {
	t.Parallel()
	confirmer := &walrelay.Relay{}
	for _, bad := range []walrelay.Config{
		{Parked: &relay.Config{Table: "other"}},
		{Parked: &relay.Config{Ordered: true}},
		{Parked: &relay.Config{Confirmer: confirmer}},
		{Parked: &relay.Config{BatchSize: -1}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(Parked %+v) = nil", *bad.Parked)
		}
	}
	for _, good := range []walrelay.Config{
		{Parked: &relay.Config{}},
		{Ordered: true, Table: "app.events", Parked: &relay.Config{}},
		{Ordered: true, Table: "app.events", Parked: &relay.Config{Ordered: true, Table: "app.events"}},
	} {
		if err := good.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", good, err)
		}
	}
	r, err := walrelay.New("postgres://localhost/x", ordered(), walrelay.Config{Ordered: true, Table: "app.events", Parked: &relay.Config{}})
	testkit.Must(t, err)
	if p := r.Config().Parked; p == nil || !p.Ordered || p.Table != "app.events" || p.Logger == nil {
		t.Errorf("Parked after defaults = %+v, want Ordered, Table app.events and the relay's logger", p)
	}
}
