package postgres

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/store"
)

// The epoch locks are keyed by the outbox's identity: a writer holding its
// transaction open in one schema holds back the frontier of its own outbox,
// not that of an outbox of the same name in another schema of the database.
// Before, the key hashed the bare name, and every such outbox waited for
// every other's writers.
func TestFrontierPerTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tbl := ident.MustTable("outbox_messages")
	o := newOutbox(tbl)
	open := func() *sql.DB {
		db := pgtest.SchemaDB(t)
		if err := o.Create(ctx, db); err != nil {
			t.Fatal(err)
		}
		return db
	}
	a, b := open(), open()
	tx, err := a.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	ev := store.Row{ID: uuid.NewString(), Type: "t", Version: 1, Topic: "t", Payload: []byte(`{}`), Metadata: []byte(`{}`), OccurredAt: time.Now()}
	if _, _, err := o.Insert(ctx, tx, store.OutboxInsertParams{Rows: []store.Row{ev}}); err != nil {
		t.Fatal(err)
	}
	const held = time.Second
	time.Sleep(held)
	behind := func(db *sql.DB) time.Duration {
		var frontier, now time.Time
		if err := db.QueryRowContext(ctx, `SELECT `+frontierSQL(tbl)+`, clock_timestamp()`).Scan(&frontier, &now); err != nil {
			t.Fatal(err)
		}
		return now.Sub(frontier)
	}
	if d := behind(a); d < held-100*time.Millisecond {
		t.Fatalf("the writer's own outbox: frontier %v behind; want it held back by the open writer (%v)", d, held)
	}
	if d := behind(b); d > held/2 {
		t.Fatalf("the outbox of the same name in another schema: frontier %v behind; want it not held back by the other's writer", d)
	}
}

// A transaction takes one epoch lock per outbox, at its first insert; a
// ROLLBACK TO SAVEPOINT that undid that insert released the lock, and the
// next insert takes it again (the setting that remembers it reverts too).
func TestEpochLockOncePerTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tbl := ident.MustTable("outbox_messages")
	o := newOutbox(tbl)
	db := pgtest.SchemaDB(t)
	if err := o.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	insert := func() {
		ev := store.Row{ID: uuid.NewString(), Type: "t", Version: 1, Topic: "t", Payload: []byte(`{}`), Metadata: []byte(`{}`), OccurredAt: time.Now()}
		if _, _, err := o.Insert(ctx, tx, store.OutboxInsertParams{Rows: []store.Row{ev}}); err != nil {
			t.Fatal(err)
		}
	}
	locks := func() int {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'
  AND classid = `+tableOID(tbl)+` AND objsubid = 2`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec := func(q string) {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	exec(`SAVEPOINT a`)
	insert()
	exec(`ROLLBACK TO SAVEPOINT a`)
	if n := locks(); n != 0 {
		t.Fatalf("%d epoch locks after the rollback to the savepoint; want 0", n)
	}
	for range 3 {
		insert()
		time.Sleep(30 * time.Millisecond) // the next insert in a later epoch
	}
	if n := locks(); n != 1 {
		t.Fatalf("%d epoch locks after three inserts in three epochs; want 1", n)
	}
}
