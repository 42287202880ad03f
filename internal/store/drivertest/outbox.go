package drivertest

import (
	"database/sql"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

var outboxTests = []test{
	{"ExistsCreateCheck", testOutboxExistsCreateCheck},
	{"InsertLeavesExistingIDsAlone", testOutboxInsertLeavesExisting},
	{"InsertIntoMissingTable", testOutboxInsertMissingTable},
	{"InsertStoresEveryColumn", testOutboxInsertStoresColumns},
	{"SettleOutcomes", testOutboxSettle},
	{"LockAggregatesSerializesWriters", testOutboxLockAggregates},
	{"Abort", testOutboxAbort},
}

// Exists reports a missing table, Create makes it (twice is fine) and Check
// finds it up to date.
func testOutboxExistsCreateCheck(t tb.TB, e *env) {
	o := e.drv.Outbox(ident.MustTable("other_outbox"))
	ok, err := o.Exists(e.ctx, e.db)
	must(t, err)
	if ok {
		t.Fatal("Exists = true before Create")
	}
	must(t, o.Check(e.ctx, e.db)) // a missing table is not an outdated one
	for range 2 {
		must(t, o.Create(e.ctx, e.db))
	}
	if ok, err = o.Exists(e.ctx, e.db); err != nil || !ok {
		t.Fatalf("Exists = %v, %v after Create", ok, err)
	}
	must(t, o.Check(e.ctx, e.db))
}

// Insert inserts new ids and leaves the rows of ids that exist alone,
// counting only what it inserted.
func testOutboxInsertLeavesExisting(t tb.TB, e *env) {
	evs := e.insert("t", "a", 2)
	e.exec(`UPDATE `+e.q()+` SET attempts = 7 WHERE id = ?`, evs[0].ID)
	again := evs[0]
	again.Payload = []byte(`{"changed":true}`)
	fresh := event("t", "account", "a")
	n, _, err := e.out.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: []store.Row{again, fresh, evs[1]}})
	must(t, err)
	if n != 1 {
		t.Fatalf("Insert over 2 existing ids and 1 new = %d, want 1", n)
	}
	if e.count() != 3 {
		t.Fatalf("%d rows, want 3", e.count())
	}
	if r := e.row(evs[0].ID); r.attempts != 7 {
		t.Fatalf("the existing row was rewritten: attempts %d", r.attempts)
	}
	var payload string
	must(t, e.db.QueryRowContext(e.ctx, e.sql.Rebind(`SELECT payload FROM `+e.q()+` WHERE id = ?`), evs[0].ID).Scan(&payload))
	if payload == string(again.Payload) {
		t.Fatal("the existing row's payload was replaced")
	}
}

// An insert into a table that does not exist says so (store.ErrTableMissing).
func testOutboxInsertMissingTable(t tb.TB, e *env) {
	o := e.drv.Outbox(ident.MustTable("missing_outbox"))
	if _, _, err := o.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: []store.Row{event("t", "", "")}}); !errors.Is(err, store.ErrTableMissing) {
		t.Fatalf("Insert into a missing table = %v, want ErrTableMissing", err)
	}
}

// What Insert stores is what a claim reads back, field by field.
func testOutboxInsertStoresColumns(t tb.TB, e *env) {
	ev := event("order.placed", "order", "o-1")
	ev.Version, ev.Topic, ev.Metadata = 3, "orders", []byte(`{"k":"v"}`)
	_, _, err := e.out.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: []store.Row{ev}})
	must(t, err)
	cs := e.claim(10)
	if len(cs) != 1 {
		t.Fatalf("claimed %d, want 1", len(cs))
	}
	c := cs[0]
	if c.ID != ev.ID || c.Type != ev.Type || c.Version != 3 || c.AggregateType != "order" || c.AggregateID != "o-1" ||
		c.Topic != "orders" || c.Attempts != 0 || c.Strikes != 0 {
		t.Fatalf("claimed %+v, inserted %+v", c, ev)
	}
	if !jsonEqual(c.Payload, ev.Payload) || !jsonEqual(c.Metadata, ev.Metadata) {
		t.Fatalf("payload %s metadata %s, want %s %s", c.Payload, c.Metadata, ev.Payload, ev.Metadata)
	}
	if !c.OccurredAt.Equal(ev.OccurredAt) {
		t.Fatalf("occurred_at %v, want %v", c.OccurredAt, ev.OccurredAt)
	}
}

// Settle says Committed for a write whose transaction committed and Unknown
// for one rolled back; a driver that hands out tokens (it can tell a
// transaction still open from one rolled back) says InProgress while the
// writing transaction is open.
func testOutboxSettle(t tb.TB, e *env) {
	write := func(tx *sql.Tx) store.Written {
		t.Helper()
		ev := event("t", "account", "a")
		_, tokens, err := e.out.Insert(e.ctx, tx, store.OutboxInsertParams{Rows: []store.Row{ev}, Tokens: true})
		must(t, err)
		id := uuid.MustParse(ev.ID)
		return store.Written{ID: id, Token: tokens[id]}
	}
	settle := func(w store.Written) store.Outcome {
		t.Helper()
		out, err := e.out.Settle(e.ctx, e.db, []store.Written{w})
		must(t, err)
		if len(out) != 1 {
			t.Fatalf("Settle returned %d outcomes for 1 write", len(out))
		}
		return out[0]
	}

	tx, err := e.db.BeginTx(e.ctx, nil)
	must(t, err)
	committed := write(tx)
	tokens := committed.Token != 0
	if tokens {
		if got := settle(committed); got != store.InProgress {
			t.Errorf("Settle of a write in an open transaction = %v, want InProgress", got)
		}
	}
	must(t, tx.Commit())
	if got := settle(committed); got != store.Committed {
		t.Errorf("Settle of a committed write = %v, want Committed", got)
	}

	tx, err = e.db.BeginTx(e.ctx, nil)
	must(t, err)
	rolledBack := write(tx)
	must(t, tx.Rollback())
	if got := settle(rolledBack); got != store.Unknown {
		t.Errorf("Settle of a rolled back write = %v, want Unknown", got)
	}
}

// A second transaction locking an aggregate the first holds waits for the
// first to end; one locking another aggregate does not wait.
func testOutboxLockAggregates(t tb.TB, e *env) {
	const hold = 300 * time.Millisecond
	first, err := e.db.BeginTx(e.ctx, nil)
	must(t, err)
	defer func() { _ = first.Rollback() }()
	must(t, e.out.LockAggregates(e.ctx, first, []int64{42, 7, 42}))
	// Something written, so that a database whose writers serialize on one
	// lock holds it from here.
	_, _, err = e.out.Insert(e.ctx, first, store.OutboxInsertParams{Rows: []store.Row{event("t", "account", "a")}})
	must(t, err)

	type lockedAt struct {
		at  time.Time
		err error
	}
	locked := make(chan lockedAt, 2)
	go func() {
		err := sqlkit.InTx(e.ctx, e.db, e.drv.LockingTx(), func(tx store.Execer) error {
			if err := e.out.LockAggregates(e.ctx, tx, []int64{42}); err != nil {
				return err
			}
			locked <- lockedAt{at: time.Now()}
			return nil
		})
		if err != nil {
			locked <- lockedAt{err: err}
		}
	}()
	time.Sleep(hold)
	ended := time.Now()
	must(t, first.Commit())
	select {
	case l := <-locked:
		must(t, l.err)
		if l.at.Before(ended) {
			t.Fatal("the second writer of aggregate 42 locked it while the first held it")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second writer never got the lock")
	}
}

// Abort makes the transaction's commit fail or roll back (Caps.AbortTx):
// nothing it wrote stays.
func testOutboxAbort(t tb.TB, e *env) {
	if !e.drv.Caps().Has(store.AbortTx) {
		t.Skip("the driver cannot abort a transaction (store.AbortTx)")
	}
	tx, err := e.db.BeginTx(e.ctx, nil)
	must(t, err)
	_, _, err = e.out.Insert(e.ctx, tx, store.OutboxInsertParams{Rows: []store.Row{event("t", "account", "a")}})
	must(t, err)
	e.out.Abort(e.ctx, tx)
	_ = tx.Commit() // an error, or a COMMIT that rolls back
	if n := e.count(); n != 0 {
		t.Fatalf("%d rows after an aborted transaction's commit, want 0", n)
	}
}
