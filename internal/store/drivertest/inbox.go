package drivertest

import (
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

var inboxTests = []test{
	{"ExistsCreateCheck", testInboxExistsCreateCheck},
	{"InsertOncePerConsumer", testInboxInsertOnce},
	{"InsertRolledBackIsForgotten", testInboxInsertRolledBack},
	{"Cleanup", testInboxCleanup},
}

func (e *env) inbox() store.Inbox { return e.drv.Inbox(ident.MustTable(store.DefaultInbox)) }

func testInboxExistsCreateCheck(t tb.TB, e *env) {
	in := e.drv.Inbox(ident.MustTable("other_inbox"))
	ok, err := in.Exists(e.ctx, e.db)
	must(t, err)
	if ok {
		t.Fatal("Exists = true before Create")
	}
	must(t, in.Check(e.ctx, e.db))
	for range 2 {
		must(t, in.Create(e.ctx, e.db))
	}
	if ok, err = in.Exists(e.ctx, e.db); err != nil || !ok {
		t.Fatalf("Exists = %v, %v after Create", ok, err)
	}
	must(t, in.Check(e.ctx, e.db))
}

// Insert reports a (consumer, id) new once; the same id for another consumer
// is new too.
func testInboxInsertOnce(t tb.TB, e *env) {
	in := e.inbox()
	for _, c := range []struct {
		consumer, id string
		want         bool
	}{
		{"billing", "m1", true},
		{"billing", "m1", false},
		{"shipping", "m1", true},
		{"billing", "m2", true},
	} {
		got, err := in.Insert(e.ctx, e.db, c.consumer, c.id)
		must(t, err)
		if got != c.want {
			t.Fatalf("Insert(%s, %s) = %v, want %v", c.consumer, c.id, got, c.want)
		}
	}
}

// An insert whose transaction rolled back leaves the key new.
func testInboxInsertRolledBack(t tb.TB, e *env) {
	in := e.inbox()
	tx, err := e.db.BeginTx(e.ctx, nil)
	must(t, err)
	if ok, err := in.Insert(e.ctx, tx, "c", "m"); err != nil || !ok {
		t.Fatalf("Insert = %v, %v", ok, err)
	}
	must(t, tx.Rollback())
	if ok, err := in.Insert(e.ctx, e.db, "c", "m"); err != nil || !ok {
		t.Fatalf("Insert after the rollback = %v, %v, want new", ok, err)
	}
}

// Cleanup deletes up to limit rows processed before olderThan ago and keeps
// the recent ones.
func testInboxCleanup(t tb.TB, e *env) {
	in := e.inbox()
	for _, id := range []string{"old1", "old2", "old3", "new"} {
		_, err := in.Insert(e.ctx, e.db, "c", id)
		must(t, err)
	}
	at, arg := e.sql.Ago(2 * time.Hour)
	e.exec(`UPDATE `+e.drv.Quote(ident.MustTable(store.DefaultInbox))+` SET processed_at = `+at+` WHERE message_id <> 'new'`, arg)
	n, err := in.Cleanup(e.ctx, e.db, time.Hour, 2)
	must(t, err)
	if n != 2 {
		t.Fatalf("Cleanup with limit 2 = %d, want 2", n)
	}
	n, err = in.Cleanup(e.ctx, e.db, time.Hour, 10)
	must(t, err)
	if n != 1 {
		t.Fatalf("second Cleanup = %d, want 1", n)
	}
	for id, want := range map[string]bool{"old1": true, "new": false} {
		// A deleted key is new again; the recent one is still there.
		ok, err := in.Insert(e.ctx, e.db, "c", id)
		must(t, err)
		if ok != want {
			t.Fatalf("Insert(%s) after Cleanup = %v, want %v", id, ok, want)
		}
	}
}
