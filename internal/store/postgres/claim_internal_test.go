package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// An ordered claim chooses where it starts by this process's clock, before
// the database's now() decides what is due. A retry that came due in between
// (the claim waited for a pool connection; the process was stopped or
// starved) lay below the start: not scanned, and, being due, not holding its
// aggregate back, whose later events were claimed, and published, first (the
// chaos run's host-fault order violation). The claim's SQL now starts at
// the retries below its start that its now() finds due. Here the process's
// clock lags the database's: the retry is due by the database's, not yet by
// the relay's.
func TestOrderedClaimStartsAtARetryDueByTheDatabasesClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, o, r := orderedOutbox(t)
	// This process's clock, stepped by the test.
	var (
		mu    sync.Mutex
		local = time.Now()
	)
	r.pos.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return local }
	step := func(d time.Duration) { mu.Lock(); local = local.Add(d); mu.Unlock() }

	insert := func(version int) string { return insertEvent(t, db, o, version, store.Schedule{}) }
	owned := []int32{0}
	claim := func(limit int) []int {
		t.Helper()
		step(frontierEvery + time.Millisecond) // each claim reads the frontier
		rows, err := r.claimOrdered(ctx, db, limit, 1, owned, nil)
		if err != nil {
			t.Fatal(err)
		}
		var vs []int
		for _, c := range rows {
			vs = append(vs, c.Version)
		}
		return vs
	}

	v1 := insert(1)
	insert(2)
	if got := claim(1); len(got) != 1 || got[0] != 1 {
		t.Fatalf("first claim: versions %v, want [1]", got)
	}
	const delay = 300 * time.Millisecond
	if _, err := r.MarkFailed(ctx, db, []store.Failure{{ID: v1, Err: "refused", Delay: delay}}, nil); err != nil {
		t.Fatal(err)
	}
	// Version 1 waits for its retry, version 2 behind it; a claim that reads
	// the frontier settles what the first saw, and the position moves past
	// both (the retry's wait will make claims start at it again).
	if got := claim(10); len(got) != 0 {
		t.Fatalf("claim while the retry waits: versions %v, want none", got)
	}
	if got := claim(10); len(got) != 0 {
		t.Fatalf("claim while the retry waits: versions %v, want none", got)
	}
	insert(3) // above the position
	// The retry comes due by the database's clock; the relay's has moved on
	// by less than the delay. The claim starts at the retry all the same:
	// its now() finds it due.
	time.Sleep(delay + 100*time.Millisecond)
	if got := claim(10); len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("claim once the retry is due by the database's clock, not yet by the relay's: versions %v, want [1 2 3]", got)
	}
}
