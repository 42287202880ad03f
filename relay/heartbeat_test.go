package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/relay"
)

// seenAt is when instance last beat in the outbox's instance table, or the
// zero time when it has no row (or the table is missing).
func seenAt(t *testing.T, db *gorm.DB, instance string) time.Time {
	t.Helper()
	var at time.Time
	if err := db.Raw(`SELECT seen_at FROM outbox_messages_relays WHERE instance = ?`, instance).Row().Scan(&at); err != nil {
		return time.Time{}
	}
	return at
}

// runFor runs r until its instance has a row in the instance table, then
// for d more, and stops it.
func runFor(t *testing.T, e *env, r *relay.Relay, instance string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	// A fleet tenant's relay beats first within heartbeatInterval (10 s).
	eventually(t, 15*time.Second, "the relay's row in the instance table", func() bool { return !seenAt(t, e.db, instance).IsZero() })
	time.Sleep(d)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// An unordered relay beats every heartbeatInterval (10 s) counted from run
// to run: run again at once (as a fleet runs a tenant's relay), it does not
// beat at its start. Its first beat made the instance table, which was
// missing.
func TestHeartbeatCountsFromRunToRun(t *testing.T) {
	e := newEnv(t)
	r, err := relay.New(e.db, newGoChannel(), relay.Config{InstanceID: "i1", PollInterval: 20 * time.Millisecond, DisableListen: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	runFor(t, e, r, "i1", 0)
	first := seenAt(t, e.db, "i1")
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		if err := r.Run(ctx); err != nil {
			t.Fatalf("Run: %v", err)
		}
		cancel()
	}
	if got := seenAt(t, e.db, "i1"); !got.Equal(first) {
		t.Fatalf("the relay beat again when run again within 10 s of its beat: seen at %v, then %v", first, got)
	}
}

// A fleet tenant's relay (Config.Tenant) does not prune the instance table
// at its first start, as a plain relay does (conformance's
// TestInstanceRowsPruned), but at a random time within the hour.
func TestTenantRelayDoesNotPruneAtStart(t *testing.T) {
	e := newEnv(t)
	plain, err := relay.New(e.db, newGoChannel(), relay.Config{InstanceID: "plain", DisableListen: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	runFor(t, e, plain, "plain", 0) // makes the table
	if err := e.db.Exec(`INSERT INTO outbox_messages_relays (instance, seen_at) VALUES ('crashed', now() - interval '25 hours')`).Error; err != nil {
		t.Fatal(err)
	}
	tenant, err := relay.New(e.db, newGoChannel(), relay.Config{InstanceID: "fleet", Tenant: "acme", DisableListen: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	runFor(t, e, tenant, "fleet", 200*time.Millisecond)
	if seenAt(t, e.db, "crashed").IsZero() {
		t.Fatal("a tenant relay pruned the instance table at its first start")
	}
	plain2, err := relay.New(e.db, newGoChannel(), relay.Config{InstanceID: "plain2", DisableListen: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	runFor(t, e, plain2, "plain2", 0)
	eventually(t, 5*time.Second, "a plain relay's prune at its start", func() bool { return seenAt(t, e.db, "crashed").IsZero() })
}

// A fleet tenant's relay makes its first beat at a random time within
// heartbeatInterval (10 s) of its making, not at its first run's start as a
// plain relay does: of ten tenant relays, each made and run for 300 ms, each
// beats with a chance of about 3%; ten plain relays all beat.
func TestTenantRelayFirstBeatSpread(t *testing.T) {
	e := newEnv(t)
	beat := func(tenant string) (n int) {
		for i := range 10 {
			id := fmt.Sprintf("%s%d", tenant, i)
			r, err := relay.New(e.db, newGoChannel(), relay.Config{InstanceID: id, Tenant: tenant, DisableListen: true, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err = r.Run(ctx) // lets a beat in flight end
			cancel()
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !seenAt(t, e.db, id).IsZero() {
				n++
			}
		}
		return n
	}
	if n := beat(""); n != 10 {
		t.Fatalf("%d of 10 plain relays beat in their first 300 ms, want all", n)
	}
	if n := beat("acme"); n > 3 {
		t.Fatalf("%d of 10 tenant relays beat in their first 300 ms, want nearly none", n)
	}
}
