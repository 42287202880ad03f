package conformance

// The operator's writes (admin.Outbox, Relay.Requeue and RequeueAll): each
// changes a row only if it is, in the statement that changes it, still in the
// state the operation is for, and none touches or waits for a row a relay
// holds claimed.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// adminTests are the conformance tests of the operator's writes.
var adminTests = []namedTest{
	{"PurgeRacingRequeueKeepsTheEvents", testAdminPurgeRacingRequeue},
	{"OperatorLeavesClaimedRowsAlone", testAdminLeavesClaimedRowsAlone},
	{"OperatorDoesNotWaitForABatchThatTookEveryDueEvent", testAdminPastTheClaimsEnd},
}

// Issue 19, item 1: two events dead for two days; an operator's transaction
// requeues one, and requeues the other and sees it die again at once, and
// stays open while a purge of the events dead for more than a day starts
// (which, where the purge waits for that transaction's row locks, it is seen
// to do), then commits. The purge deletes neither: the first is pending, the
// second died a moment ago. The purge's pick of the rows, made before that
// commit, is not enough: the statement that deletes re-checks.
func testAdminPurgeRacingRequeue(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	var evs []uuid.UUID
	for _, x := range e.write(2, 1) {
		evs = append(evs, x[0])
	}
	for _, id := range evs {
		dl.KillEvent(t, e.db, id, 48*time.Hour, "old")
	}
	ctx := context.Background()
	o, err := admin.Open(ctx, e.open(), admin.Config{})
	must(t, err)

	// A requeue held open: its statement as the relay's (dead_at cleared,
	// the counts reset, due now).
	tx := e.open().Begin()
	must(t, tx.Error)
	t.Cleanup(func() { tx.Rollback() })
	for _, id := range evs {
		res := tx.Exec(`UPDATE outbox_messages SET dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL WHERE id = ? AND dead_at IS NOT NULL`, id.String())
		if res.Error != nil || res.RowsAffected != 1 {
			t.Fatalf("requeue %s in the open transaction: %d rows, %v", id, res.RowsAffected, res.Error)
		}
	}
	now, arg := dl.Ago(0)
	must(t, tx.Exec(`UPDATE outbox_messages SET dead_at = `+now+`, last_error = 'young' WHERE id = ?`, arg, evs[1].String()).Error)

	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := o.PurgeDead(ctx, 24*time.Hour)
		done <- result{n, err}
	}()
	var res *result
	deadline := time.Now().Add(10 * time.Second)
	if dl.SQL.LockWaiters() == "" {
		// No way to see a connection wait for the lock: give the purge the
		// time to start (SQLite's single writer makes it wait for the
		// commit whatever it does).
		deadline = time.Now().Add(300 * time.Millisecond)
	}
wait:
	for time.Now().Before(deadline) {
		select {
		case r := <-done:
			res = &r
			break wait
		case <-time.After(10 * time.Millisecond):
		}
		if lockWaiters(t, dl, tx) > 0 {
			break
		}
	}
	must(t, tx.Commit().Error)
	if res == nil {
		select {
		case r := <-done:
			res = &r
		case <-time.After(30 * time.Second):
			t.Fatal("the purge never returned")
		}
	}
	must(t, res.err)
	rows := map[uuid.UUID]row{}
	for _, r := range e.rows() {
		rows[r.ID] = r
	}
	if a, ok := rows[evs[0]]; !ok || !a.Pending() {
		t.Errorf("the requeued event: %+v, there %v (purged %d)", a, ok, res.n)
	}
	if b, ok := rows[evs[1]]; !ok || !b.Dead || b.LastError != "young" {
		t.Errorf("the event that died again: %+v, there %v (purged %d)", b, ok, res.n)
	}
	if res.n != 0 {
		t.Errorf("purged %d events, none dead for a day", res.n)
	}
}

// lockWaiters counts the transactions of the test's database that wait for a
// lock tx holds (or for any lock: testsql.SQL.LockWaiters); 0 where a waiting
// connection cannot be seen.
func lockWaiters(t *testing.T, dl testkit.Dialect, tx *gorm.DB) int {
	t.Helper()
	q := dl.SQL.LockWaiters()
	if q == "" {
		return 0
	}
	var n int
	must(t, tx.Raw(q).Row().Scan(&n))
	return n
}

// Issue 19, item 1: while a relay holds a batch claimed (blocked inside
// Publish), the operator requeues the batch's events by id (refused: not
// dead), the dead events of the batch's type, all dead events, and purges
// dead events, through admin.Outbox and through the relay: each returns at
// once (within a bound far below the batch's PublishTimeout, which it would
// wait for behind a lock), changes only the dead events it is for, and the
// batch's rows are as the claim left them (not deleted, not requeued, still
// leased on SQLite).
func testAdminLeavesClaimedRowsAlone(t *testing.T, dl testkit.Dialect) {
	forModes(t, func(t *testing.T, ordered bool) {
		e := newRelayEnv(t, dl)
		var evs []uuid.UUID
		for _, x := range e.write(6, 1) {
			evs = append(evs, x[0])
		}
		// d: dead, of the batch's type; p: dead for two days; q: dead for
		// an hour; the other three pending, the relay's batch.
		d, p, q, claimed := evs[0], evs[1], evs[2], evs[3:]
		dl.KillEvent(t, e.db, d, time.Hour, "old")
		dl.KillEvent(t, e.db, p, 48*time.Hour, "old")
		dl.KillEvent(t, e.db, q, time.Hour, "old")
		must(t, testkit.SetOutboxColumn(e.db, p, "type", "other.purge"))
		must(t, testkit.SetOutboxColumn(e.db, q, "type", "other.all"))
		holdBatch(t, e, ordered)
		before := testkit.Waits(t, e.db)
		ctx := context.Background()
		o, err := admin.Open(ctx, e.open(), admin.Config{})
		must(t, err)
		op := func(what string, f func(ctx context.Context) error) {
			t.Helper()
			ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := f(ctx); err != nil {
				t.Fatalf("%s while a relay holds a batch: %v", what, err)
			}
		}
		count := func(want int64, f func(ctx context.Context) (int64, error)) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				n, err := f(ctx)
				if err == nil && n != want {
					err = fmt.Errorf("changed %d events, want %d", n, want)
				}
				return err
			}
		}
		notDead := func(f func(ctx context.Context) error) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				if err := f(ctx); !errors.Is(err, admin.ErrNotDead) {
					return fmt.Errorf("requeue of a claimed event: %w, want not dead", err)
				}
				return nil
			}
		}
		op("admin requeue of a claimed event", notDead(func(ctx context.Context) error { _, err := o.Requeue(ctx, claimed[0]); return err }))
		op("admin requeue of claimed events", notDead(func(ctx context.Context) error { _, err := o.Requeue(ctx, claimed[1:]...); return err }))
		op("admin requeue by the batch's type", count(1, func(ctx context.Context) (int64, error) { return o.RequeueType(ctx, "account.deposited") }))
		op("admin purge", count(1, func(ctx context.Context) (int64, error) { return o.PurgeDead(ctx, 24*time.Hour) }))
		op("admin requeue all", count(1, o.RequeueAll))
		op("admin requeue all again", count(0, o.RequeueAll))
		op("admin purge of every dead event", count(0, func(ctx context.Context) (int64, error) { return o.PurgeDead(ctx, 0) }))

		rows := map[uuid.UUID]row{}
		for _, rw := range e.rows() {
			rows[rw.ID] = rw
		}
		if _, ok := rows[p]; ok {
			t.Fatal("the purge left the event dead for two days")
		}
		for _, id := range []uuid.UUID{d, q} {
			if rw := rows[id]; rw.Dead || rw.Processed {
				t.Fatalf("requeued event %s: %+v", id, rw)
			}
		}
		after := testkit.Waits(t, e.db)
		for _, id := range claimed {
			rw, ok := rows[id]
			if !ok || !rw.Pending() || rw.Attempts != 0 || rw.LastError != "" {
				t.Fatalf("claimed event %s after the operator's writes: %+v, there %v", id, rw, ok)
			}
			if d := after[id] - before[id]; d > time.Second || d < -time.Second {
				t.Fatalf("claimed event %s: due in %v before the operator's writes, %v after", id, before[id], after[id])
			}
		}
	})
}

// Issue 19, item 1: a batch that claimed every due event and publishes for
// minutes; the operator requeues and purges dead events meanwhile, and none
// of it waits for the batch. On MySQL the claim's locking scan of the index
// of pending events reads the entry after the due ones and keeps its lock to
// the batch's end, even at READ COMMITTED: with 0001's index that entry was
// the first dead (or processed) row, and its purge or requeue waited for the
// publishes (0006_queue_index puts those rows before the pending ones). The
// dead events outnumber the due ones, so that the claim reads the index.
func testAdminPastTheClaimsEnd(t *testing.T, dl testkit.Dialect) {
	forModes(t, func(t *testing.T, ordered bool) {
		e := newRelayEnv(t, dl)
		var evs []uuid.UUID
		for _, x := range e.write(24, 1) {
			evs = append(evs, x[0])
		}
		dead := evs[3:]
		for i, id := range dead {
			dl.KillEvent(t, e.db, id, time.Duration(len(dead)-i)*time.Hour, "old")
		}
		holdBatch(t, e, ordered)
		ctx := context.Background()
		o, err := admin.Open(ctx, e.open(), admin.Config{})
		must(t, err)
		// Well inside the batch's two minutes, with room for a loaded machine.
		const bound = 10 * time.Second
		op := func(what string, want int64, f func(ctx context.Context) (int64, error)) {
			t.Helper()
			ctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			n, err := f(ctx)
			if err != nil {
				t.Fatalf("%s while a batch that took every due event publishes: %v", what, err)
			}
			if n != want {
				t.Fatalf("%s: changed %d events, want %d", what, n, want)
			}
		}
		first := dead[0] // dead the longest: the first dead row in dead_at order
		op("admin requeue of the first dead event", 1, func(ctx context.Context) (int64, error) { return o.Requeue(ctx, first) })
		op("admin purge of the events dead for over 6 hours", int64(len(dead)-1-6), func(ctx context.Context) (int64, error) {
			return o.PurgeDead(ctx, 6*time.Hour+30*time.Minute)
		})
		op("admin requeue of every dead event", 6, o.RequeueAll)
	})
}

// holdBatch runs a relay whose publisher holds its first batch for minutes
// (released when the test ends) and returns once it publishes.
func holdBatch(t *testing.T, e *relayEnv, ordered bool) {
	t.Helper()
	blocked := testkit.NewBlocking(t)
	const pt = 2 * time.Minute
	r := e.relay(e.open(), blocked, relay.Config{Ordered: ordered, PollInterval: 20 * time.Millisecond,
		PublishTimeout: pt, LeaseDuration: 10 * pt, BatchSize: 10})
	e.run(r)
	t.Cleanup(blocked.Release) // before the relay is stopped
	select {
	case <-blocked.Entered():
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never published")
	}
}
