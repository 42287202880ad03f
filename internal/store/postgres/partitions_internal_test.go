package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/pgtest"
)

// The partition DDL's transaction, holding the outbox's ACCESS EXCLUSIVE
// lock, in a relay that stops between two statements (SIGSTOP, a VM freeze,
// a starved process): the server ends its session after
// partitionHoldTimeout idle, and a writer waiting for the lock goes on
// then. Before, the writer waited as long as the relay was stopped (4.5s in
// a chaos run, a relay stopped 1.5 leases).
func TestPartitionLockReleasedWhenTheRelayStops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.SchemaDB(t)
	if _, err := db.ExecContext(ctx, `CREATE TABLE outbox (n int)`); err != nil {
		t.Fatal(err)
	}
	tx, err := lockTimeoutTx(ctx, db, ident.MustTable("outbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	done := make(chan error, 1)
	go func() { _, err := db.ExecContext(ctx, `INSERT INTO outbox VALUES (1)`); done <- err }()
	const stopped = 5 * time.Second // the relay, stopped with the lock held
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(began); waited > 4*partitionHoldTimeout { // room for a loaded machine
			t.Errorf("the writer waited %v for the stopped relay's lock, want about %v", waited, partitionHoldTimeout)
		}
	case <-time.After(stopped):
		t.Fatalf("the writer still waits after %v: the stopped relay's lock was kept", stopped)
	}
	if _, err := tx.ExecContext(ctx, `SELECT 1`); err == nil {
		t.Error("the stopped relay's transaction went on after its session should have been ended")
	}
}
