package outboxhook_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/outboxhook"
)

// The WAL keeps no event for later: a save whose aggregate recorded a cancel
// or a move fails with ErrScheduledWAL before anything is written, and the
// aggregate keeps its events and its change pending.
func TestWALRefusesAggregateCancel(t *testing.T) {
	db, slot := setupWAL(t)
	for name, record := range map[string]func(o *Order){
		"CancelKey": func(o *Order) { o.CancelKey("k") },
		"Cancel":    func(o *Order) { o.Cancel(uuid.New()) },
		"MoveKey":   func(o *Order) { o.MoveKey("k", events.After(time.Hour)) },
		"Move":      func(o *Order) { o.Move(uuid.New(), events.Schedule{}) },
	} {
		o := NewOrder()
		record(o)
		if err := db.Create(o).Error; !errors.Is(err, outboxhook.ErrScheduledWAL) {
			t.Fatalf("%s: save = %v, want ErrScheduledWAL", name, err)
		}
		if len(o.Events()) != 1 || len(o.Reschedules()) != 1 {
			t.Fatalf("%s: pending %d events, %d changes; want 1, 1", name, len(o.Events()), len(o.Reschedules()))
		}
	}
	if n := count(t, db, "orders"); n != 0 {
		t.Fatalf("%d orders saved", n)
	}
	must(t, db.Create(NewOrder()).Error)
	wantWAL(t, db, slot, "order.placed")
}

// With RequireRescheduled, a save whose cancel finds nothing fails with
// ErrNotScheduled and writes nothing; without it, it saves and reports.
func TestRequireRescheduled(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	o := NewOrder()
	o.CancelKey("nothing")
	err := db.WithContext(outboxhook.RequireRescheduled(context.Background())).Create(o).Error
	if !errors.Is(err, outboxhook.ErrNotScheduled) {
		t.Fatalf("save = %v, want ErrNotScheduled", err)
	}
	if count(t, db, "orders") != 0 || count(t, db, "outbox_messages") != 0 {
		t.Fatal("a failed save wrote")
	}
	must(t, db.Create(o).Error)
	wantTypes(t, db, "order.placed")
	if r := o.Rescheduled(); len(r) != 1 || !r[0].Unknown() || r[0].Key != "nothing" {
		t.Fatalf("Rescheduled() = %+v", r)
	}
}

// A transaction in doubt (something ran on the *sql.Tx SQLTx hands out)
// keeps the cancels it committed pending: the next save applies them again,
// and reports what it found then (nothing left to cancel).
func TestAggregateCancelInDoubtAppliedAgain(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	o := NewOrder()
	o.Schedule(OrderPaid{OrderID: o.ID}, events.After(time.Hour).Keyed("k"))
	must(t, db.Create(o).Error)
	must(t, db.Transaction(func(tx *gorm.DB) error {
		o.CancelKey("k")
		if err := tx.Save(o).Error; err != nil {
			return err
		}
		sqlTx, ok := outboxhook.SQLTx(tx)
		if !ok {
			t.Fatal("no *sql.Tx")
		}
		_, err := sqlTx.Exec("SELECT 1")
		return err
	}))
	wantTypes(t, db, "order.placed")
	if len(o.Reschedules()) != 1 {
		t.Fatalf("pending changes = %+v, want the cancel", o.Reschedules())
	}
	must(t, db.Save(o).Error)
	if r := o.Rescheduled(); len(r) != 1 || !r[0].Unknown() {
		t.Fatalf("Rescheduled() = %+v, want one unknown", r)
	}
}
