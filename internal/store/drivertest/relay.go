package drivertest

import (
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

var relayTests = []test{
	{"ClaimDueInOrder", testRelayClaimDueInOrder},
	{"ClaimSkipsClaimedRows", testRelayClaimSkipsClaimed},
	{"BatchGivesBackWhatItDidNotMark", testRelayBatchGivesBack},
	{"LeasedBatchFencedByItsLease", testRelayLeasedBatchFenced},
	{"ClaimOrderedByPartitionBehindBlockedAggregate", testRelayClaimOrdered},
	{"MarkPublished", testRelayMarkPublished},
	{"MarkFailed", testRelayMarkFailed},
	{"SavepointUndoesItsMarks", testRelaySavepoint},
	{"FencedMarksLostLease", testRelayFencedMarksLostLease},
	{"RecoverOutage", testRelayRecoverOutage},
	{"RecoverOutageLetsInsertsThrough", testRelayRecoverOutageInserts},
	{"SweepDeclaredByCaps", testRelaySweepDeclared},
	{"PartitionsDeclaredByCaps", testRelayPartitionsDeclared},
	{"Stats", testRelayStats},
	{"NextTellsIdleFromDueAndLater", testRelayNext},
	{"Cleanup", testRelayCleanup},
	{"CreateCheck", testRelayCreateCheck},
	{"CheckNamesMissingMigration", testRelayCheckOutdated},
}

// A claim returns the due events in the order they became due, and neither
// events not yet due nor processed nor dead ones.
func testRelayClaimDueInOrder(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 5))
	e.stamp(evs[1], "available_at", -time.Hour) // due in an hour
	e.stamp(evs[2], "processed_at", 0)
	e.kill(evs[3], 0, "boom")
	sameIDs(t, "claimed", ids(e.claim(10)), []string{evs[0], evs[4]})
}

// A claim skips the rows another open batch holds (locked or leased),
// without waiting for it; the first batch's marks then settle its rows.
func testRelayClaimSkipsClaimed(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 4))
	first := e.batch(2, time.Minute)
	sameIDs(t, "first claim", ids(first.Rows()), evs[:2])

	type claimed struct {
		cs  []store.Row
		err error
	}
	done := make(chan claimed, 1)
	go func() {
		var c claimed
		b, err := e.rel.Claim(e.ctx, e.db, store.ClaimParams{Limit: 10, Hold: time.Minute})
		if err == nil {
			c.cs, err = b.Rows(), b.Commit(e.ctx)
		}
		c.err = err
		done <- c
	}()
	select {
	case c := <-done:
		must(t, c.err)
		sameIDs(t, "second claim", ids(c.cs), evs[2:])
	case <-time.After(5 * time.Second):
		first.Close() // lets the second claim end before the test does
		<-done
		t.Fatal("the second claim waited for the first batch")
	}
	must(t, first.MarkPublished(e.ctx, ids(first.Rows())))
	must(t, first.Commit(e.ctx))
	if n := e.count(); n != 2 {
		t.Fatalf("%d rows after marking 2 of 4, want 2", n)
	}
}

// A batch's commit makes due again, at once, the rows it neither published
// nor failed (a lease given back; row locks end with the transaction), and
// leaves the others as marked.
func testRelayBatchGivesBack(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 4))
	b := e.batch(10, time.Minute)
	sameIDs(t, "claimed", ids(b.Rows()), evs)
	must(t, b.MarkPublished(e.ctx, evs[:1]))
	_, err := b.MarkFailed(e.ctx, []store.Failure{{ID: evs[1], Err: "refused", Strike: true, Delay: time.Hour}})
	must(t, err)
	must(t, b.Commit(e.ctx))
	sameIDs(t, "claimed after the commit", ids(e.claim(10)), evs[2:])
	if r := e.row(evs[1]); r.attempts != 1 || r.wait < 50*time.Minute {
		t.Fatalf("the failed row after the commit: %+v", r)
	}
}

// Without row locks a claim leases its rows for its hold: once the lease ran
// out and another batch claimed them, the first batch's marks change nothing
// (and its commit gives nothing back); the new holder's marks work.
func testRelayLeasedBatchFenced(t tb.TB, e *env) {
	if e.drv.Caps().Has(store.RowLocks) {
		t.Skip("the driver claims under row locks (store.RowLocks): a batch holds its rows however long it is paused")
	}
	evs := evIDs(e.insert("t", "a", 3))
	late := e.batch(10, 20*time.Millisecond)
	sameIDs(t, "first claim", ids(late.Rows()), evs)
	if r := e.row(evs[0]); r.wait > time.Second {
		t.Fatalf("a row leased for 20ms is due in %v", r.wait)
	}
	time.Sleep(100 * time.Millisecond) // the lease runs out
	taken := e.batch(10, time.Minute)
	sameIDs(t, "claim after the lease ran out", ids(taken.Rows()), evs)

	must(t, late.MarkPublished(e.ctx, evs[:1]))
	_, err := late.MarkFailed(e.ctx, []store.Failure{{ID: evs[1], Err: "late", Strike: true}})
	must(t, err)
	must(t, late.Commit(e.ctx)) // evs[2] untried: given back only while still the late batch's
	if n := e.count(); n != 3 {
		t.Fatalf("the marks of a batch whose lease ran out deleted rows: %d left of 3", n)
	}
	if r := e.row(evs[1]); r.attempts != 0 {
		t.Fatalf("the failure mark of a batch whose lease ran out counted: attempts %d", r.attempts)
	}
	if again := e.claim(10); len(again) != 0 {
		t.Fatalf("the late batch gave back rows another batch holds: claimed again %v", ids(again))
	}
	must(t, taken.MarkPublished(e.ctx, evs))
	must(t, taken.Commit(e.ctx))
	if n := e.count(); n != 0 {
		t.Fatalf("%d rows after the lease holder's marks, want 0", n)
	}
}

// An ordered claim returns the due events of the owned partitions in
// insertion order, every event in exactly one partition, and none behind an
// earlier event of its aggregate that waits for a retry.
func testRelayClaimOrdered(t tb.TB, e *env) {
	var all []string
	for _, agg := range []string{"a", "b", "c", "d", "e", "f"} {
		all = append(all, evIDs(e.insert("t", agg, 2))...)
	}
	// Each claim read and ended without marks, as a relay's batch that
	// published nothing.
	rows := func(partitions int, owned []int32) []store.Row {
		b := e.ordered(100, partitions, owned, nil)
		b.Close()
		return b.Rows()
	}
	if none := rows(2, nil); len(none) != 0 {
		t.Fatalf("a claim of no partitions returned %d events", len(none))
	}
	seen := map[string]int{}
	for _, part := range []int32{0, 1} {
		cs := rows(2, []int32{part})
		for i, c := range cs {
			seen[c.ID]++
			if i > 0 && indexOf(all, c.ID) < indexOf(all, cs[i-1].ID) {
				t.Fatalf("partition %d claimed out of insertion order: %v", part, ids(cs))
			}
		}
	}
	if len(seen) != len(all) {
		t.Fatalf("the two partitions claimed %d distinct events of %d", len(seen), len(all))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("event %s claimed by %d partitions", id, n)
		}
	}

	// a's first event fails and waits: a's second waits behind it.
	b := e.ordered(100, 1, []int32{0}, nil)
	_, err := b.MarkFailed(e.ctx, []store.Failure{{ID: all[0], Err: "boom", Strike: true, Delay: time.Hour}})
	must(t, err)
	must(t, b.Commit(e.ctx))
	sameIDs(t, "ordered claim with a's first event failing", ids(rows(1, []int32{0})), all[2:])
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// MarkPublished deletes the rows it is given, or with ClaimParams.Keep stamps
// them processed and clears their last error; other rows are left alone. An
// id the batch did not claim is refused.
func testRelayMarkPublished(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 4))
	e.exec(`UPDATE `+e.q()+` SET last_error = 'earlier' WHERE id = ?`, evs[2])
	b := e.batch(2, time.Minute)
	must(t, b.MarkPublished(e.ctx, evs[:2]))
	must(t, b.MarkPublished(e.ctx, nil)) // nothing to mark
	if err := b.MarkPublished(e.ctx, evs[3:]); err == nil {
		t.Fatal("MarkPublished of an event the batch did not claim succeeded")
	}
	must(t, b.Commit(e.ctx))
	kept, err := e.rel.Claim(e.ctx, e.db, store.ClaimParams{Limit: 1, Hold: time.Minute, Keep: true})
	must(t, err)
	must(t, kept.MarkPublished(e.ctx, evs[2:3]))
	must(t, kept.Commit(e.ctx))
	for i, want := range []row{{}, {}, {found: true, processed: true}, {found: true}} {
		r := e.row(evs[i])
		if r.found != want.found || r.processed != want.processed || (r.found && r.processed && r.lastError != "") {
			t.Fatalf("row %d after the marks: %+v", i, r)
		}
	}
}

// MarkFailed counts an attempt, a strike when confirmed, stores the error and
// makes the row due after the delay, or dead; it returns the database's time
// of the marks.
func testRelayMarkFailed(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 3))
	b := e.batch(10, time.Minute)
	before := time.Now()
	at, err := b.MarkFailed(e.ctx, []store.Failure{
		{ID: evs[0], Err: "broker down", Strike: true, Delay: time.Hour},
		{ID: evs[1], Err: "timeout", Delay: time.Minute},
		{ID: evs[2], Err: "refused", Strike: true, Dead: true},
	})
	must(t, err)
	// A dead row takes no more failures.
	_, err = b.MarkFailed(e.ctx, []store.Failure{{ID: evs[2], Err: "again", Strike: true}})
	must(t, err)
	if _, err := b.MarkFailed(e.ctx, []store.Failure{{ID: uuid.NewString(), Err: "x"}}); err == nil {
		t.Fatal("MarkFailed of an event the batch did not claim succeeded")
	}
	must(t, b.Commit(e.ctx))
	if d := at.Sub(before); d < -time.Minute || d > time.Minute {
		t.Fatalf("MarkFailed's time %v is %v from the test's clock", at, d)
	}
	for i, c := range []struct {
		strikes  int
		err      string
		dead     bool
		min, max time.Duration
	}{
		{1, "broker down", false, 50 * time.Minute, 61 * time.Minute},
		{0, "timeout", false, 50 * time.Second, 61 * time.Second},
		{1, "refused", true, -time.Hour, time.Hour},
	} {
		r := e.row(evs[i])
		if r.attempts != 1 || r.strikes != c.strikes || r.lastError != c.err || r.dead != c.dead || !r.failed {
			t.Fatalf("row %d after MarkFailed: %+v", i, r)
		}
		if r.wait < c.min || r.wait > c.max {
			t.Fatalf("row %d due in %v, want %v..%v", i, r.wait, c.min, c.max)
		}
	}
}

// A mark under a Savepoint whose function fails is undone, and the marks
// before it stay.
func testRelaySavepoint(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 2))
	b := e.batch(10, time.Minute)
	must(t, b.MarkPublished(e.ctx, evs[:1]))
	refused := errors.New("refused after marking")
	err := b.Savepoint(e.ctx, func() error {
		if _, err := b.MarkFailed(e.ctx, []store.Failure{{ID: evs[1], Err: "undone", Strike: true, Delay: time.Hour}}); err != nil {
			return err
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("Savepoint = %v, want the function's error", err)
	}
	must(t, b.Commit(e.ctx))
	if r := e.row(evs[0]); r.found {
		t.Fatal("the mark before the savepoint was undone")
	}
	if r := e.row(evs[1]); !r.found || r.attempts != 0 || r.lastError != "" {
		t.Fatalf("the mark under the failed savepoint stayed: %+v", r)
	}
}

// The fenced marks of a batch whose partition lease another instance took
// over (under a new generation) change nothing and return
// store.ErrLeaseLost; a batch of the new holder marks.
func testRelayFencedMarksLostLease(t tb.TB, e *env) {
	ls := e.rel.Leases()
	must(t, ls.Seed(e.ctx, e.db, 1))
	mine, err := ls.Acquire(e.ctx, e.db, store.AcquireParams{Instance: "paused", Lease: 20 * time.Millisecond, Limit: 1, Partitions: 1})
	must(t, err)
	if len(mine) != 1 {
		t.Fatalf("Acquire = %v, want partition 0", mine)
	}
	evs := evIDs(e.insert("t", "a", 2))
	stale := e.ordered(10, 1, []int32{0}, &store.Fence{Instance: "paused", Partitions: 1, Leases: mine})
	sameIDs(t, "ordered claim", ids(stale.Rows()), evs)

	time.Sleep(100 * time.Millisecond) // the lease runs out
	theirs, err := ls.Acquire(e.ctx, e.db, store.AcquireParams{Instance: "other", Lease: time.Minute, Limit: 1, Partitions: 1})
	must(t, err)
	if len(theirs) != 1 || theirs[0].Generation == mine[0].Generation {
		t.Fatalf("take-over Acquire = %v after %v", theirs, mine)
	}

	// Committed all the same: the fenced statements themselves change nothing.
	if err := stale.MarkPublished(e.ctx, evs[:1]); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("MarkPublished under a lost lease = %v, want ErrLeaseLost", err)
	}
	if _, err := stale.MarkFailed(e.ctx, []store.Failure{{ID: evs[1], Err: "late", Strike: true, Dead: true}}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("MarkFailed under a lost lease = %v, want ErrLeaseLost", err)
	}
	must(t, stale.Commit(e.ctx))
	for _, id := range evs {
		if r := e.row(id); !r.found || r.attempts != 0 || r.dead || r.processed {
			t.Fatalf("a mark under a lost lease changed row %s: %+v", id, r)
		}
	}

	held := e.ordered(10, 1, []int32{0}, &store.Fence{Instance: "other", Partitions: 1, Leases: theirs})
	must(t, held.MarkPublished(e.ctx, ids(held.Rows())))
	must(t, held.Commit(e.ctx))
	if n := e.count(); n != 0 {
		t.Fatalf("%d rows after the lease holder's marks, want 0", n)
	}
}

// RecoverOutage makes due now the retries of pending events of the given
// (topic, type) pairs that failed at or after since; others keep waiting.
// With a fence, only in the partitions its leases still hold.
func testRelayRecoverOutage(t tb.TB, e *env) {
	a := evIDs(e.insert("a.happened", "x", 1))[0]
	b := evIDs(e.insert("b.happened", "x", 1))[0]
	fail := func() time.Time {
		t.Helper()
		batch := e.ordered(10, 1, []int32{0}, nil)
		since, err := batch.MarkFailed(e.ctx, []store.Failure{
			{ID: a, Err: "outage", Delay: time.Hour},
			{ID: b, Err: "outage", Delay: time.Hour},
		})
		must(t, err)
		must(t, batch.Commit(e.ctx))
		return since
	}
	since := fail()
	recover := func(rec store.Recovery) int64 {
		t.Helper()
		n, err := e.rel.RecoverOutage(e.ctx, e.db, rec)
		must(t, err)
		return n
	}
	if n := recover(store.Recovery{Since: since.Add(-time.Second), Topics: []string{"a.happened"}, Types: []string{"a.happened"}}); n != 1 {
		t.Fatalf("RecoverOutage = %d, want 1", n)
	}
	if r := e.row(a); r.wait > time.Second {
		t.Fatalf("the recovered event is due in %v", r.wait)
	}
	if r := e.row(b); r.wait < 50*time.Minute {
		t.Fatalf("another pair's event is due in %v, want still about an hour", r.wait)
	}
	if n := recover(store.Recovery{Since: since.Add(time.Hour), Topics: []string{"b.happened"}, Types: []string{"b.happened"}}); n != 0 {
		t.Fatalf("RecoverOutage of failures after since = %d, want 0", n)
	}

	ls := e.rel.Leases()
	must(t, ls.Seed(e.ctx, e.db, 1))
	mine, err := ls.Acquire(e.ctx, e.db, store.AcquireParams{Instance: "me", Lease: time.Minute, Limit: 1, Partitions: 1})
	must(t, err)
	both := store.Recovery{Since: since.Add(-time.Second), Topics: []string{"b.happened"}, Types: []string{"b.happened"}}
	both.Fence = &store.Fence{Instance: "me", Partitions: 1, Leases: []store.Lease{{Partition: 0, Generation: mine[0].Generation + 1}}}
	if n := recover(both); n != 0 {
		t.Fatalf("RecoverOutage fenced by a lease not held = %d, want 0", n)
	}
	both.Fence = &store.Fence{Instance: "me", Partitions: 1, Leases: mine}
	if n := recover(both); n != 1 {
		t.Fatalf("RecoverOutage fenced by the lease held = %d, want 1", n)
	}
}

// An outage's recovery never holds back the application's inserts, even
// while it waits for a row another batch has just marked failed and not yet
// committed (MySQL at REPEATABLE READ, the session's default, kept the gap
// before that row locked for the wait, where new events go: saves waited
// 1.8s in a chaos run). Not for a database of one writer, where the open
// batch itself holds every insert back (SQLite).
func testRelayRecoverOutageInserts(t tb.TB, e *env) {
	if e.sql.OneWriter() {
		t.Skip("one writer at a time: the open batch holds inserts back by design")
	}
	failed := evIDs(e.insert("a.happened", "x", 3))
	b := e.batch(10, time.Minute)
	since, err := b.MarkFailed(e.ctx, []store.Failure{{ID: failed[0], Err: "outage", Delay: time.Hour}})
	must(t, err)
	must(t, b.Commit(e.ctx))
	// Another relay's batch, its failure marked, not yet committed.
	open := e.batch(10, time.Minute)
	_, err = open.MarkFailed(e.ctx, []store.Failure{{ID: failed[1], Err: "outage", Delay: time.Hour}})
	must(t, err)

	recovered := make(chan error, 1)
	go func() {
		_, err := e.rel.RecoverOutage(e.ctx, e.db, store.Recovery{Since: since.Add(-time.Second),
			Topics: []string{"a.happened"}, Types: []string{"a.happened"}})
		recovered <- err
	}()
	time.Sleep(300 * time.Millisecond) // the recovery reaches the open batch's row

	inserted := make(chan error, 1)
	go func() {
		_, _, err := e.out.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: []store.Row{event("a.happened", "account", "y")}})
		inserted <- err
	}()
	select {
	case err := <-inserted:
		must(t, err)
	case <-time.After(10 * time.Second):
		open.Close()
		t.Logf("once the batch ended: the insert %v, the recovery %v", <-inserted, <-recovered)
		t.Fatal("an insert waited for the outage's recovery")
	}
	must(t, open.Commit(e.ctx))
	must(t, <-recovered)
}

// Without Position the ordered sweep says it is not supported; with it, a
// sweep of partitions never claimed finds nothing below their positions.
func testRelaySweepDeclared(t tb.TB, e *env) {
	e.insert("t", "a", 2)
	n, err := e.rel.Sweep(e.ctx, e.db, 1, []int32{0})
	if !e.drv.Caps().Has(store.Position) {
		if !errors.Is(err, store.ErrNotSupported) {
			t.Fatalf("Sweep without Position = %d, %v; want store.ErrNotSupported", n, err)
		}
		return
	}
	must(t, err)
	if n != 0 {
		t.Fatalf("Sweep before any claim found %d events below the positions", n)
	}
}

// Without Partitions the outbox is never partitioned and the partition
// operations say they are not supported; with it, a partitioned outbox is made
// where none exists, and its coming partitions created.
func testRelayPartitionsDeclared(t tb.TB, e *env) {
	p, err := e.rel.Partitioned(e.ctx, e.db)
	must(t, err)
	if p {
		t.Fatal("the suite's outbox, created unpartitioned, is partitioned")
	}
	if !e.drv.Caps().Has(store.Partitions) {
		if err := e.rel.CreatePartitioned(e.ctx, e.db); !errors.Is(err, store.ErrNotSupported) {
			t.Fatalf("CreatePartitioned without Partitions = %v, want store.ErrNotSupported", err)
		}
		if _, _, err := e.rel.MaintainPartitions(e.ctx, e.db, time.Hour, time.Hour); !errors.Is(err, store.ErrNotSupported) {
			t.Fatalf("MaintainPartitions without Partitions = %v, want store.ErrNotSupported", err)
		}
		if _, err := e.rel.CleanupDefault(e.ctx, e.db, time.Hour, 10); !errors.Is(err, store.ErrNotSupported) {
			t.Fatalf("CleanupDefault without Partitions = %v, want store.ErrNotSupported", err)
		}
		return
	}
	part := e.drv.Relay(ident.MustTable("herald_partitioned"))
	must(t, part.CreatePartitioned(e.ctx, e.db))
	p, err = part.Partitioned(e.ctx, e.db)
	must(t, err)
	if !p {
		t.Fatal("CreatePartitioned made an unpartitioned table")
	}
	created, _, err := part.MaintainPartitions(e.ctx, e.db, time.Hour, 24*time.Hour)
	must(t, err)
	if created < 3 {
		t.Fatalf("MaintainPartitions created %d partitions, want the one before now and two after", created)
	}
}

// Stats counts pending, failing (pending with a failed attempt) and dead
// events, and the age of the oldest pending one.
func testRelayStats(t tb.TB, e *env) {
	s, err := e.rel.Stats(e.ctx, e.db)
	must(t, err)
	if s.Pending != 0 || s.Failing != 0 || s.Dead != 0 || s.OldestPending != 0 {
		t.Fatalf("Stats of an empty outbox = %+v", s)
	}
	evs := evIDs(e.insert("t", "a", 4))
	e.stamp(evs[0], "created_at", time.Hour)
	e.exec(`UPDATE `+e.q()+` SET attempts = 2 WHERE id = ?`, evs[1])
	e.kill(evs[2], 0, "boom")
	s, err = e.rel.Stats(e.ctx, e.db)
	must(t, err)
	if s.Pending != 3 || s.Failing != 1 || s.Dead != 1 {
		t.Fatalf("Stats = %+v, want 3 pending, 1 failing, 1 dead", s)
	}
	if s.OldestPending < 59*time.Minute || s.OldestPending > 61*time.Minute {
		t.Fatalf("OldestPending = %v, want about an hour", s.OldestPending)
	}
}

// Heartbeats.Next tells an outbox with nothing pending (false) from one
// with an event due now (zero or less) and one whose earliest pending event
// comes due later (how long until then); processed and dead events count
// for nothing.
func testRelayNext(t tb.TB, e *env) {
	hb := e.drv.Heartbeats(e.table)
	next := func() (time.Duration, bool) {
		t.Helper()
		d, ok, err := hb.Next(e.ctx, e.db)
		must(t, err)
		return d, ok
	}
	if d, ok := next(); ok {
		t.Fatalf("Next of an empty outbox = %v, true", d)
	}
	evs := evIDs(e.insert("t", "a", 4))
	e.kill(evs[0], 0, "boom")
	e.exec(`UPDATE `+e.q()+` SET processed_at = created_at WHERE id = ?`, evs[1])
	e.stamp(evs[2], "available_at", -time.Hour)
	e.stamp(evs[3], "available_at", -2*time.Hour)
	if d, ok := next(); !ok || d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("Next = %v, %v; want about an hour", d, ok)
	}
	e.stamp(evs[3], "available_at", time.Second)
	if d, ok := next(); !ok || d > 0 {
		t.Fatalf("Next with an event due = %v, %v; want zero or less", d, ok)
	}
	e.kill(evs[2], 0, "boom")
	e.kill(evs[3], 0, "boom")
	if d, ok := next(); ok {
		t.Fatalf("Next with only processed and dead events = %v, true", d)
	}
}

// Cleanup deletes up to limit events processed before olderThan ago; pending,
// dead and recently processed events stay.
func testRelayCleanup(t tb.TB, e *env) {
	evs := evIDs(e.insert("t", "a", 6))
	for _, id := range evs[:3] {
		e.stamp(id, "processed_at", 2*time.Hour)
	}
	e.stamp(evs[3], "processed_at", time.Minute)
	e.kill(evs[4], 3*time.Hour, "boom")
	n, err := e.rel.Cleanup(e.ctx, e.db, time.Hour, 2)
	must(t, err)
	if n != 2 {
		t.Fatalf("Cleanup with limit 2 = %d, want 2", n)
	}
	n, err = e.rel.Cleanup(e.ctx, e.db, time.Hour, 100)
	must(t, err)
	if n != 1 {
		t.Fatalf("second Cleanup = %d, want 1", n)
	}
	for i, want := range []bool{false, false, false, true, true, true} {
		if r := e.row(evs[i]); r.found != want {
			t.Fatalf("row %d after Cleanup: found %v, want %v", i, r.found, want)
		}
	}
}

// The relay's Create is idempotent and Check finds its additions.
func testRelayCreateCheck(t tb.TB, e *env) {
	must(t, e.rel.Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true, Retention: true, Check: true}))
	must(t, e.rel.Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true, Retention: true, Check: true}))
	for _, ordered := range []bool{false, true} {
		must(t, e.rel.Check(e.ctx, e.db, store.RelayCheckParams{Ordered: ordered, Retention: true}))
	}
}

// Check of a relay table that lacks a column a migration adds returns
// store.ErrSchemaOutdated naming that migration, in ordered mode (which uses
// the lease table) and not otherwise.
func testRelayCheckOutdated(t tb.TB, e *env) {
	e.exec(`ALTER TABLE ` + e.drv.Quote(e.table.Derived("_leases")) + ` DROP COLUMN generation`)
	err := e.rel.Check(e.ctx, e.db, store.RelayCheckParams{Ordered: true, Retention: false})
	if !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), "0005_lease_generation") {
		t.Fatalf("Check without the leases' generation = %v, want ErrSchemaOutdated naming 0005_lease_generation", err)
	}
	must(t, e.rel.Check(e.ctx, e.db, store.RelayCheckParams{Ordered: false, Retention: false}))
	// Create with Check answers as Check from the catalog read it made: it
	// adds no column to a table that was there.
	err = e.rel.Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true, Check: true})
	if !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), "0005_lease_generation") {
		t.Fatalf("Create with Check without the leases' generation = %v, want ErrSchemaOutdated naming 0005_lease_generation", err)
	}
	must(t, e.rel.Create(e.ctx, e.db, store.RelayCreateParams{Check: true}))
}
