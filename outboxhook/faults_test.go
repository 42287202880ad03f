package outboxhook_test

// Regression tests for the write-path faults found when Herald was tried from
// outside (issue 9, items 4-14): each failed before its fix.

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
)

// HookRecorder records an event from its AfterCreate hook (After), or from its
// BeforeCreate hook (Before); Big makes that event's payload oversize.
type HookRecorder struct {
	ID     uint `gorm:"primaryKey"`
	Before bool
	Big    bool
	aggregate.Root
}

func (h *HookRecorder) event() events.Event {
	if h.Big {
		return Big{Data: strings.Repeat("x", 4096)}
	}
	return DocEvent{Note: "from a hook"}
}

func (h *HookRecorder) BeforeCreate(*gorm.DB) error {
	if h.Before {
		h.Record(h.event())
	}
	return nil
}

func (h *HookRecorder) AfterCreate(*gorm.DB) error {
	if !h.Before {
		h.Record(h.event())
	}
	return nil
}

// 4. With SkipDefaultTransaction, events recorded by a hook are written in the
// same transaction as the row: both or neither.
func TestSkipDefaultTransactionHookEvents(t *testing.T) {
	db := setup(t, outboxhook.Config{MaxPayloadBytes: 1024}, nil)
	must(t, db.AutoMigrate(&HookRecorder{}))
	skip := db.Session(&gorm.Session{SkipDefaultTransaction: true})
	for _, before := range []bool{false, true} {
		// Bad input from the hook: nothing written, neither the row nor the event.
		bad := &HookRecorder{Before: before, Big: true}
		wantErrIs(t, skip.Create(bad).Error, outboxhook.ErrPayloadTooLarge)
		if n := count(t, db, "hook_recorders"); n != 0 {
			t.Fatalf("before=%v: the row was kept without its event (%d rows)", before, n)
		}
		if n := count(t, db, "outbox_messages"); n != 0 {
			t.Fatalf("before=%v: %d events written", before, n)
		}
	}
	// Good input: one transaction wrote both (same xmin).
	good := &HookRecorder{}
	must(t, skip.Create(good).Error)
	var rowX, eventX string
	raw := db.Session(&gorm.Session{NewDB: true})
	must(t, raw.Raw(`SELECT xmin::text FROM hook_recorders WHERE id = ?`, good.ID).Scan(&rowX).Error)
	must(t, raw.Raw(`SELECT xmin::text FROM outbox_messages`).Scan(&eventX).Error)
	if rowX == "" || rowX != eventX {
		t.Fatalf("row written by transaction %q, its event by %q", rowX, eventX)
	}
	wantNoPending(t, good)
}

// Forwarder writes another aggregate through another *gorm.DB from its
// AfterCreate hook, handing it the hook's context, as code passing tracing on
// does.
type Forwarder struct {
	ID uint `gorm:"primaryKey"`
	aggregate.Root
	other *gorm.DB
	child *Order
}

func (f *Forwarder) AfterCreate(tx *gorm.DB) error {
	return f.other.WithContext(tx.Statement.Context).Create(f.child).Error
}

// 5. A hook's context passed to another *gorm.DB: each handle's writes commit
// with their events, once, and no connection leaks.
func TestHookContextPassedToAnotherDB(t *testing.T) {
	t.Parallel()
	for _, skip := range []bool{false, true} {
		t.Run(map[bool]string{false: "default transaction", true: "SkipDefaultTransaction"}[skip], func(t *testing.T) {
			t.Parallel()
			_, dsn := pgtest.Schema(t)
			// A transaction left open (the bug this guards against) is ended by the
			// server after 3 s, so that the test fails instead of hanging.
			dsn += "&idle_in_transaction_session_timeout=3000"
			open := func(gcfg *gorm.Config) *gorm.DB {
				db := pgtest.OpenDSN(t, dsn, gcfg)
				must(t, db.Use(outboxhook.New(outboxhook.Config{})))
				return db
			}
			db := open(nil)
			must(t, db.AutoMigrate(&Order{}, &Line{}, &Forwarder{}))
			other := open(&gorm.Config{SkipDefaultTransaction: skip})
			child := NewOrder()
			f := &Forwarder{other: other, child: child}
			f.Record(DocEvent{Note: "parent"})
			must(t, db.Create(f).Error)
			if n := count(t, db, "orders"); n != 1 {
				t.Fatalf("the other handle's row is missing (%d rows)", n)
			}
			wantTypes(t, db, "order.placed", "doc.changed")
			wantNoPending(t, f, child)
			child.Pay(5)
			must(t, db.Save(child).Error)
			wantTypes(t, db, "order.placed", "doc.changed", "order.paid") // nothing written twice
			sqlDB, err := other.DB()
			must(t, err)
			deadline := time.Now().Add(2 * time.Second)
			for sqlDB.Stats().InUse != 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := sqlDB.Stats().InUse; n != 0 {
				t.Fatalf("%d connections of the other handle still in use", n)
			}
		})
	}
}

// 6. A model copied by value shares its recorded events with the original:
// no panic, no leak, each event written exactly once.
func TestCopiedByValue(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	o := NewOrder()
	batch := []Order{*o}
	must(t, db.Create(&batch).Error)
	wantTypes(t, db, "order.placed")
	o.Pay(7)
	must(t, db.Save(o).Error) // the original: its copy wrote order.placed
	wantTypes(t, db, "order.placed", "order.paid")
	wantNoPending(t, o, &batch[0])

	// The original saved first, then the copy.
	o2 := NewOrder()
	cp := *o2
	must(t, db.Create(o2).Error)
	cp.Status = "copied"
	must(t, db.Save(&cp).Error)
	wantTypes(t, db, "order.placed", "order.paid", "order.placed")
	wantNoPending(t, &cp)
}

// 7. An aggregate with pending events passed by value fails the save with
// ErrAggregateByValue, nothing written; one with none is left alone.
func TestAggregateByValue(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	o := NewOrder()
	wantErrIs(t, db.Create(*o).Error, outboxhook.ErrAggregateByValue)
	must(t, db.Create(o).Error) // pointer: fine
	o.Pay(3)
	wantErrIs(t, db.Save(*o).Error, outboxhook.ErrAggregateByValue)
	var status string
	must(t, db.Session(&gorm.Session{NewDB: true}).Raw(`SELECT status FROM orders`).Scan(&status).Error)
	if status != "new" {
		t.Fatalf("the row was updated (%s) without its events", status)
	}
	wantTypes(t, db, "order.placed")
	wantPending(t, o, 1)
	// A value with no events, as in db.Model(Order{}), works as ever.
	must(t, db.Model(Order{}).Where("id = ?", o.ID).Update("status", "x").Error)
	must(t, db.Save(o).Error)
	wantTypes(t, db, "order.placed", "order.paid")
}

// EmptyIdentified reports an empty aggregate id.
type EmptyIdentified struct {
	ID uint `gorm:"primaryKey"`
	aggregate.Root
}

func (*EmptyIdentified) AggregateID() string { return "" }

// 8. An Identified aggregate whose id is empty fails with ErrEmptyAggregateID.
func TestIdentifiedEmptyID(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&EmptyIdentified{}))
	e := &EmptyIdentified{}
	e.Record(DocEvent{})
	wantErrIs(t, db.Create(e).Error, outboxhook.ErrEmptyAggregateID)
	if count(t, db, "empty_identifieds") != 0 || count(t, db, "outbox_messages") != 0 {
		t.Fatal("written despite the empty id")
	}
	tx := db.Begin()
	wantErrIs(t, tx.Create(e).Error, outboxhook.ErrEmptyAggregateID)
	_ = tx.Commit() // the caller ignores the error: the row must not commit alone
	if count(t, db, "empty_identifieds") != 0 || count(t, db, "outbox_messages") != 0 {
		t.Fatal("the caller's transaction committed the row without its events")
	}
}

// 9. A multi-row DELETE that deleted only some of its rows cannot say whose
// events to write: it fails with ErrPartialWrite and writes none.
func TestPartialMultiRowDelete(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	a, b := NewOrder(), NewOrder()
	must(t, db.Create(&[]*Order{a, b}).Error)
	raw := db.Session(&gorm.Session{NewDB: true})
	must(t, raw.Exec(`DELETE FROM orders WHERE id = ?`, b.ID).Error) // b is gone already
	a.Record(DocEvent{Note: "a deleted"})
	b.Record(DocEvent{Note: "b deleted"})
	wantErrIs(t, db.Delete(&[]*Order{a, b}).Error, outboxhook.ErrPartialWrite)
	wantTypes(t, db, "order.placed", "order.placed")
	if count(t, db, "orders") != 1 {
		t.Fatal("the delete was kept without its events")
	}
	wantPending(t, a, 1)
	// One by one, each write is known.
	must(t, db.Delete(a).Error)
	wantTypes(t, db, "order.placed", "order.placed", "doc.changed")
	// A delete of every row writes every event.
	c, d := NewOrder(), NewOrder()
	must(t, db.Create(&[]*Order{c, d}).Error)
	c.Record(DocEvent{})
	d.Record(DocEvent{})
	must(t, db.Delete(&[]*Order{c, d}).Error)
	wantTypes(t, db, "order.placed", "order.placed", "doc.changed", "order.placed", "order.placed", "doc.changed", "doc.changed")
}

// 10. CreateInBatches: the events are forgotten when its transaction commits,
// as in every transaction GORM opens itself.
func TestCreateInBatchesForgetsAtCommit(t *testing.T) {
	var notified atomic.Int64
	db := setup(t, outboxhook.Config{Notify: func() { notified.Add(1) }}, nil)
	var orders []*Order
	for range 5 {
		orders = append(orders, NewOrder())
	}
	must(t, db.CreateInBatches(orders, 2).Error)
	for _, o := range orders {
		wantNoPending(t, o)
	}
	if notified.Load() == 0 {
		t.Fatal("no Notify after the commit")
	}
	wantTypes(t, db, "order.placed", "order.placed", "order.placed", "order.placed", "order.placed")
}

// Part is a child entity that reports its parent's identity, so that the
// parent's events are ordered with its own: two writers of one aggregate that
// share no row.
type Part struct {
	ID       uuid.UUID `gorm:"type:uuid;primaryKey"`
	ParentID uuid.UUID `gorm:"type:uuid"`
	aggregate.Root
}

func (p *Part) AggregateType() string { return "Order" }
func (p *Part) AggregateID() string   { return p.ParentID.String() }

// 11. Per aggregate, insertion order (seq, which the ordered relay publishes
// in) is commit order, also when the writers share no row: the second writer
// waits for the first.
func TestAggregateWritersSerialized(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&Part{}))
	parent := uuid.New()
	for _, via := range []string{"Identified", "AddMessages"} {
		write := func(tx *gorm.DB, note string) error {
			if via == "AddMessages" {
				m := message.NewMessage(uuid.NewString(), []byte(`{"Note":"`+note+`"}`))
				m.Metadata.Set(events.MetaType, "part.added")
				m.Metadata.Set(events.MetaAggregateType, "Order")
				m.Metadata.Set(events.MetaAggregateID, parent.String())
				return outboxhook.AddMessages(tx, "parts", m)
			}
			p := &Part{ID: uuid.New(), ParentID: parent}
			p.Record(DocEvent{Note: note})
			return tx.Create(p).Error
		}
		var (
			mu     sync.Mutex
			commit []string
		)
		t1 := db.Begin()
		must(t, write(t1, via+"-first"))
		done := make(chan error, 1)
		go func() {
			t2 := db.Begin()
			if err := write(t2, via+"-second"); err != nil {
				t2.Rollback()
				done <- err
				return
			}
			err := t2.Commit().Error
			mu.Lock()
			commit = append(commit, via+"-second")
			mu.Unlock()
			done <- err
		}()
		select {
		case err := <-done: // not serialized: the second committed first
			must(t, err)
			must(t, t1.Commit().Error)
			mu.Lock()
			commit = append(commit, via+"-first")
			mu.Unlock()
		case <-time.After(300 * time.Millisecond): // the second waits for the first
			mu.Lock()
			commit = append(commit, via+"-first")
			mu.Unlock()
			must(t, t1.Commit().Error)
			must(t, <-done)
		}
		var notes []string
		must(t, db.Session(&gorm.Session{NewDB: true}).Raw(
			`SELECT payload->>'Note' FROM outbox_messages WHERE aggregate_id = ? AND payload->>'Note' LIKE ? ORDER BY seq`,
			parent.String(), via+"-%").Scan(&notes).Error)
		if strings.Join(notes, ",") != strings.Join(commit, ",") {
			t.Fatalf("%s: outbox order %v, commit order %v", via, notes, commit)
		}
	}
}

// 12. A *gorm.DB returned by a write and reused for another: the second write is
// judged on its own, its events forgotten at its commit, and Notify called.
func TestReusedResultHandle(t *testing.T) {
	var notified atomic.Int64
	db := setup(t, outboxhook.Config{Notify: func() { notified.Add(1) }}, nil)
	o := NewOrder()
	res := db.Create(o)
	must(t, res.Error)
	o.Pay(2)
	must(t, res.Session(&gorm.Session{NewDB: true}).Save(o).Error)
	wantTypes(t, db, "order.placed", "order.paid")
	wantNoPending(t, o)
	if n := notified.Load(); n != 2 {
		t.Fatalf("Notify called %d times, want 2", n)
	}
	must(t, db.Save(o).Error)
	wantTypes(t, db, "order.placed", "order.paid")
}

// 13. AddMessages never drops a message: messages carrying a copied herald id
// get ids of their own; real collisions are errors.
func TestAddMessagesIDs(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	incoming := events.NewID().String()
	var outs []*message.Message
	for i := range 3 {
		m := message.NewMessage(uuid.NewString(), []byte(`{"n":`+string(rune('0'+i))+`}`))
		m.Metadata.Set(events.MetaID, incoming) // copied from the message the handler got
		m.Metadata.Set("correlation_id", "c-1")
		outs = append(outs, m)
	}
	must(t, db.Transaction(func(tx *gorm.DB) error { return outboxhook.AddMessages(tx, "out", outs...) }))
	rows := wantTypes(t, db, "message", "message", "message")
	for i, r := range rows {
		if r.ID.String() != outs[i].UUID {
			t.Fatalf("row %d has id %s, message UUID %s", i, r.ID, outs[i].UUID)
		}
	}
	// Two messages with one id: an error, nothing written.
	id := uuid.NewString()
	twins := []*message.Message{message.NewMessage(id, []byte(`1`)), message.NewMessage(id, []byte(`2`))}
	err := db.Transaction(func(tx *gorm.DB) error { return outboxhook.AddMessages(tx, "out", twins...) })
	wantErrIs(t, err, outboxhook.ErrDuplicateID)
	// An id already in the outbox: an error, and the transaction cannot commit.
	tx := db.Begin()
	wantErrIs(t, outboxhook.AddMessages(tx, "out", message.NewMessage(outs[0].UUID, []byte(`9`))), outboxhook.ErrDuplicateID)
	_ = tx.Commit()
	wantTypes(t, db, "message", "message", "message")
	// A message UUID that is not a UUID gets a fresh one.
	must(t, outboxhook.AddMessages(db, "out", message.NewMessage("not-a-uuid", []byte(`{}`))))
	wantTypes(t, db, "message", "message", "message", "message")
}

// 14. A mixed-case table name names one table everywhere.
func TestMixedCaseTable(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.Schema(t)
	for range 2 { // the second plugin finds the table the first created
		db := pgtest.OpenDSN(t, dsn, nil)
		must(t, db.Use(outboxhook.New(outboxhook.Config{Table: "OutBox"})))
		must(t, db.AutoMigrate(&Order{}))
		must(t, db.Create(NewOrder()).Error)
		must(t, outboxhook.Add(db, DocEvent{}))
	}
	db := pgtest.OpenDSN(t, dsn, nil)
	var n int64
	must(t, db.Raw(`SELECT count(*) FROM "OutBox"`).Scan(&n).Error)
	if n != 4 {
		t.Fatalf(`"OutBox" has %d rows, want 4`, n)
	}
	var tables []string
	must(t, db.Raw(`SELECT relname::text FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND lower(relname) = 'outbox'`).Scan(&tables).Error)
	if len(tables) != 1 {
		t.Fatalf("tables named outbox in any case: %v", tables)
	}
}

// A savepoint rolled back inside a hook of a statement GORM wrapped in its own
// transaction takes the events written after it with it.
func TestSavepointRolledBackInHook(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&SavepointHook{}))
	h := &SavepointHook{child: NewOrder()}
	must(t, db.Create(h).Error)
	wantPending(t, h.child, 1)
	if count(t, db, "orders") != 0 {
		t.Fatal("the savepoint's row was kept")
	}
	wantTypes(t, db)
	must(t, db.Create(h.child).Error)
	wantTypes(t, db, "order.placed")
}

// SavepointHook writes a child aggregate inside a savepoint from its AfterCreate
// hook, then rolls the savepoint back.
type SavepointHook struct {
	ID uint `gorm:"primaryKey"`
	aggregate.Root
	child *Order
}

func (s *SavepointHook) AfterCreate(tx *gorm.DB) error {
	_ = tx.Transaction(func(tx2 *gorm.DB) error {
		if err := tx2.Create(s.child).Error; err != nil {
			return err
		}
		return errBoom
	})
	return nil
}
