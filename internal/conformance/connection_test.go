package conformance

// Saves through GORM's db.Connection (one session of the pool, for session
// settings, advisory locks, temporary tables): a transaction begun on that
// connection, an event it wrote that was then cancelled or published (its
// row deleted) is not written again by the aggregate's next save; one that
// rolled back is, where the plugin saw the transaction end.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

// connectionSave is one way of saving through db.Connection.
type connectionSave struct {
	name string
	// watched: the plugin sees the connection before the transaction begins,
	// so it sees the transaction end (see docs/limits.md).
	watched bool
	save    func(db *gorm.DB, fn func(tx *gorm.DB) error) error
}

var connectionSaves = []connectionSave{
	{name: "Transaction first", save: func(db *gorm.DB, fn func(tx *gorm.DB) error) error {
		return db.Connection(func(tx *gorm.DB) error { return tx.Transaction(fn) })
	}},
	{name: "nested Transaction first", save: func(db *gorm.DB, fn func(tx *gorm.DB) error) error {
		return db.Connection(func(tx *gorm.DB) error {
			return tx.Transaction(func(tx *gorm.DB) error { return tx.Transaction(fn) })
		})
	}},
	{name: "Transaction after a statement", watched: true, save: func(db *gorm.DB, fn func(tx *gorm.DB) error) error {
		return db.Connection(func(tx *gorm.DB) error {
			if err := tx.Exec("SELECT 1").Error; err != nil { // a session setting, a lock
				return err
			}
			return tx.Transaction(fn)
		})
	}},
	{name: "nested Transaction after a query", watched: true, save: func(db *gorm.DB, fn func(tx *gorm.DB) error) error {
		return db.Connection(func(tx *gorm.DB) error {
			var n int
			if err := tx.Raw("SELECT 1").Scan(&n).Error; err != nil {
				return err
			}
			return tx.Transaction(func(tx *gorm.DB) error { return tx.Transaction(fn) })
		})
	}},
	{name: "save on the connection", watched: true, save: func(db *gorm.DB, fn func(tx *gorm.DB) error) error {
		return db.Connection(fn)
	}},
}

// TestConnection runs on every database (HERALD_TEST_DIALECTS), with and
// without PrepareStmt and SkipDefaultTransaction.
func TestConnection(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, dl testkit.Dialect) {
		for _, gcfg := range []gorm.Config{{}, {PrepareStmt: true}, {SkipDefaultTransaction: true}} {
			db := setup(t, dl, outboxhook.Config{}, &gcfg)
			must(t, db.AutoMigrate(&Account{}))
			for _, s := range connectionSaves {
				name := fmt.Sprintf("%s/PrepareStmt=%v/SkipDefaultTransaction=%v", s.name, gcfg.PrepareStmt, gcfg.SkipDefaultTransaction)
				t.Run(name, func(t *testing.T) {
					t.Run("CancelledReminderNotWrittenAgain", func(t *testing.T) { testConnectionCancelledReminder(t, db, s) })
					t.Run("DeletedEventNotWrittenAgain", func(t *testing.T) { testConnectionDeletedEvent(t, db, s) })
					t.Run("RolledBackEventWrittenLater", func(t *testing.T) { testConnectionRolledBack(t, db, dl, s) })
				})
			}
			t.Run(fmt.Sprintf("SavepointRolledBack/PrepareStmt=%v/SkipDefaultTransaction=%v", gcfg.PrepareStmt, gcfg.SkipDefaultTransaction),
				func(t *testing.T) { testConnectionSavepoint(t, db) })
		}
	})
}

// accountRows counts the outbox rows of the account.
func accountRows(t *testing.T, db *gorm.DB, a *Account) int64 {
	t.Helper()
	var n int64
	must(t, db.Session(&gorm.Session{NewDB: true}).Table("outbox_messages").
		Where("aggregate_id = ?", a.ID.String()).Count(&n).Error)
	return n
}

// (a) A reminder saved through db.Connection's transaction, then cancelled,
// is not written again by the aggregate's next save.
func testConnectionCancelledReminder(t *testing.T, db *gorm.DB, s connectionSave) {
	a := &Account{ID: uuid.New()}
	key := "reminder:" + a.ID.String()
	a.Schedule(Deposited{AccountID: a.ID, Seq: 0}, events.After(time.Hour).Keyed(key))
	must(t, s.save(db, func(tx *gorm.DB) error { return tx.Create(a).Error }))
	if n := accountRows(t, db, a); n != 1 {
		t.Fatalf("%d outbox rows after the save, want 1 (the reminder)", n)
	}
	if s.watched {
		wantNoPending(t, a) // the commit was seen
	}
	must(t, db.Transaction(func(tx *gorm.DB) error {
		res, err := outboxhook.CancelKey(tx, key)
		if err == nil && res.Changed != 1 {
			err = fmt.Errorf("cancel by key = %+v, want Changed 1", res)
		}
		return err
	}))
	if n := accountRows(t, db, a); n != 0 {
		t.Fatalf("%d outbox rows after the cancel, want 0", n)
	}
	a.Balance = 10
	a.Record(Deposited{AccountID: a.ID, Seq: 1})
	must(t, db.Save(a).Error)
	rows := testkit.Outbox(t, db)
	var got []int
	for _, r := range rows {
		if r.AggregateID == a.ID.String() {
			got = append(got, depositSeq([]byte(r.Payload)))
		}
	}
	if len(got) != 1 || got[0] != 1 {
		t.Fatalf("outbox holds deposits %v of the account after its next save, want [1]: the cancelled reminder (0) was written again", got)
	}
	wantNoPending(t, a)
}

// (b) An event saved through db.Connection's transaction and deleted from
// the outbox (as the relay does once it has published it) is not written
// again by the aggregate's next save.
func testConnectionDeletedEvent(t *testing.T, db *gorm.DB, s connectionSave) {
	a := &Account{ID: uuid.New()}
	a.Record(Deposited{AccountID: a.ID, Seq: 0})
	must(t, s.save(db, func(tx *gorm.DB) error { return tx.Create(a).Error }))
	if n := accountRows(t, db, a); n != 1 {
		t.Fatalf("%d outbox rows after the save, want 1", n)
	}
	must(t, db.Exec("DELETE FROM outbox_messages WHERE aggregate_id = ?", a.ID.String()).Error) // published
	a.Balance = 10
	a.Record(Deposited{AccountID: a.ID, Seq: 1})
	must(t, db.Save(a).Error)
	if n := accountRows(t, db, a); n != 1 {
		t.Fatalf("%d outbox rows after the next save, want 1: the published event was written again", n)
	}
	wantNoPending(t, a)
}

// (c) An aggregate saved through db.Connection in a transaction that rolls
// back keeps its events, and a later committed save writes them: where the
// plugin sees the transaction end (PostgreSQL always: it asks the server).
func testConnectionRolledBack(t *testing.T, db *gorm.DB, dl testkit.Dialect, s connectionSave) {
	if s.name == "save on the connection" {
		t.Skip("no transaction of the caller's to roll back")
	}
	if !s.watched && dl.Name != "postgres" {
		t.Skip("a transaction begun by the connection's first call is not seen end; only PostgreSQL can tell later that it rolled back (docs/limits.md)")
	}
	a := &Account{ID: uuid.New()}
	a.Record(Deposited{AccountID: a.ID, Seq: 0})
	boom := errors.New("rolled back")
	err := s.save(db, func(tx *gorm.DB) error {
		if err := tx.Create(a).Error; err != nil {
			return err
		}
		return boom
	})
	wantErrIs(t, err, boom)
	if n := accountRows(t, db, a); n != 0 {
		t.Fatalf("%d outbox rows after the rollback, want 0", n)
	}
	wantPending(t, a, 1)
	must(t, db.Create(a).Error)
	if n := accountRows(t, db, a); n != 1 {
		t.Fatalf("%d outbox rows after the committed save, want 1: the rolled-back event was lost", n)
	}
	wantNoPending(t, a)
}

// A nested transaction rolled back to its savepoint, in a transaction of
// db.Connection's that commits, takes its events with it; the aggregate keeps
// them and a later save writes them; the events saved before the savepoint
// are forgotten at the commit.
func testConnectionSavepoint(t *testing.T, db *gorm.DB) {
	kept, undone := &Account{ID: uuid.New()}, &Account{ID: uuid.New()}
	kept.Record(Deposited{AccountID: kept.ID, Seq: 0})
	undone.Record(Deposited{AccountID: undone.ID, Seq: 0})
	boom := errors.New("rolled back to the savepoint")
	must(t, db.Connection(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT 1").Error; err != nil {
			return err
		}
		return tx.Transaction(func(tx *gorm.DB) error {
			if _, err := tx.DB(); err != nil { // as GORM finds it under a bare *sql.Tx
				return fmt.Errorf("tx.DB() in the connection's transaction: %w", err)
			}
			if err := tx.Create(kept).Error; err != nil {
				return err
			}
			err := tx.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(undone).Error; err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				return fmt.Errorf("nested transaction = %w, want %w", err, boom)
			}
			return nil
		})
	}))
	if n, m := accountRows(t, db, kept), accountRows(t, db, undone); n != 1 || m != 0 {
		t.Fatalf("outbox rows after the commit: %d of the kept account, %d of the undone one; want 1, 0", n, m)
	}
	wantNoPending(t, kept)
	wantPending(t, undone, 1)
	must(t, db.Create(undone).Error)
	if n := accountRows(t, db, undone); n != 1 {
		t.Fatalf("%d outbox rows of the undone account after its save, want 1", n)
	}
	wantNoPending(t, undone)
}
