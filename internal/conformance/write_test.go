package conformance

// The write path: every GORM path of the README, atomic and exactly once, on
// each database.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

// writeTests are the write path's conformance tests.
var writeTests = []namedTest{
	{"CreateOne", testCreateOne},
	{"CreateSliceAndPointers", testCreateSliceAndPointers},
	{"CreateInBatches", testCreateInBatches},
	{"SaveZeroAndPresetKey", testSaveZeroAndPresetKey},
	{"SavePresetKeyRollsBackTogether", testSavePresetKeyRollsBackTogether},
	{"Updates", testUpdates},
	{"DeleteAndSoftDelete", testDeleteAndSoftDelete},
	{"Associations", testAssociations},
	{"UserTransaction", testUserTransaction},
	{"NestedSavepointRollback", testNestedSavepointRollback},
	{"SavepointRollbackThenResaveInSameTx", testSavepointRollbackThenResaveInSameTx},
	{"ManualBeginCommit", testManualBeginCommit},
	{"PrepareStmt", testPrepareStmt},
	{"SkipDefaultTransaction", testSkipDefaultTransaction},
	{"DryRun", testDryRun},
	{"SameAggregateTwiceInOneTransaction", testSameAggregateTwiceInOneTransaction},
	{"RolledBackSaveRetried", testRolledBackSaveRetried},
	{"ConcurrentSaves", testConcurrentSaves},
	{"SavePresetKeyInsertFailsWritesNothing", testSavePresetKeyInsertFailsWritesNothing},
	{"CommitFailureKeepsEventsPending", testCommitFailureKeepsEventsPending},
	{"SkipDefaultTransactionHookEvents", testSkipDefaultTransactionHookEvents},
	{"HookContextPassedToAnotherDB", testHookContextPassedToAnotherDB},
	{"CopiedByValue", testCopiedByValue},
	{"AggregateByValue", testAggregateByValue},
	{"IdentifiedEmptyID", testIdentifiedEmptyID},
	{"PartialMultiRowDelete", testPartialMultiRowDelete},
	{"UpsertWritesOnlyWrittenRows", testUpsertWritesOnlyWrittenRows},
	{"CreateInBatchesForgetsAtCommit", testCreateInBatchesForgetsAtCommit},
	{"AggregateWritersSerialized", testAggregateWritersSerialized},
	{"ReusedResultHandle", testReusedResultHandle},
	{"AddMessagesIDs", testAddMessagesIDs},
	{"MixedCaseTable", testMixedCaseTable},
	{"SavepointRolledBackInHook", testSavepointRolledBackInHook},
	{"RawSavepointSpellings", testRawSavepointSpellings},
	{"BadInput", testBadInput},
	{"UnstorableInput", testUnstorableInput},
	{"PayloadAtMaxLimit", testPayloadAtMaxLimit},
	{"FailureAfterWriteAbortsCallersTransaction", testFailureAfterWriteAbortsCallersTransaction},
	{"EmptyAggregateID", testEmptyAggregateID},
	{"TableMissingWithoutAutoCreate", testTableMissingWithoutAutoCreate},
	{"Add", testAdd},
	{"MetadataAndTopic", testMetadataAndTopic},
	{"Version", testVersion},
	{"TraceContextStored", testTraceContextStored},
}

var errBoom = errors.New("boom")

func testCreateOne(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	o := NewOrder()
	must(t, db.Create(o).Error)
	rows := wantTypes(t, db, "order.placed")
	r := rows[0]
	if r.AggregateType != "Order" || r.AggregateID != o.ID.String() || r.Topic != "order.placed" || r.Version != 1 {
		t.Fatalf("row = %+v", r)
	}
	if r.ID.Version() != 7 {
		t.Fatalf("event id %s is not a UUIDv7", r.ID)
	}
	if got := decode(t, r.Payload)["OrderID"]; got != o.ID.String() {
		t.Fatalf("payload OrderID = %v", got)
	}
	wantNoPending(t, o)
	// Saving again writes nothing more: the events were handed over once.
	must(t, db.Save(o).Error)
	wantTypes(t, db, "order.placed")
}

func testCreateSliceAndPointers(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	vals := []Order{*NewOrder(), *NewOrder()}
	must(t, db.Create(&vals).Error)
	ptrs := []*Order{NewOrder(), NewOrder(), NewOrder()}
	must(t, db.Create(&ptrs).Error)
	ptrs2 := []*Order{NewOrder()}
	must(t, db.Create(ptrs2).Error) // the slice itself, not a pointer to it
	rows := wantTypes(t, db, "order.placed", "order.placed", "order.placed", "order.placed", "order.placed", "order.placed")
	ids := map[string]bool{}
	for _, r := range rows {
		ids[r.AggregateID] = true
	}
	for _, o := range append(ptrs, ptrs2...) {
		if !ids[o.ID.String()] {
			t.Fatalf("no event for order %s", o.ID)
		}
		wantNoPending(t, o)
	}
	for i := range vals {
		wantNoPending(t, &vals[i])
	}
}

func testCreateInBatches(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	var orders []*Order
	for range 25 {
		orders = append(orders, NewOrder())
	}
	must(t, db.CreateInBatches(orders, 10).Error)
	if n := len(outbox(t, db)); n != 25 {
		t.Fatalf("outbox has %d rows, want 25", n)
	}
	// CreateInBatches commits in a transaction of its own that the hook does not
	// see end; the next save learns it committed and writes nothing again.
	orders[0].Pay(10)
	must(t, db.Save(orders[0]).Error)
	if n := len(outbox(t, db)); n != 26 {
		t.Fatalf("outbox has %d rows, want 26", n)
	}
	wantNoPending(t, orders[0])
}

func testSaveZeroAndPresetKey(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	// Zero primary key with a database default: Save creates.
	d := &Doc{Title: "a"}
	d.Record(DocEvent{Note: "created"})
	must(t, db.Save(d).Error)
	if d.ID == 0 {
		t.Fatal("no id assigned")
	}
	// Preset, non-zero key of a row that does not exist: Save runs an UPDATE that
	// touches nothing, then INSERTs. The events are written once, by the INSERT.
	o := NewOrder()
	o.Pay(5)
	must(t, db.Save(o).Error)
	rows := wantTypes(t, db, "doc.changed", "order.placed", "order.paid")
	if rows[0].AggregateID != fmt.Sprint(d.ID) || rows[0].AggregateType != "Doc" {
		t.Fatalf("doc event row = %+v", rows[0])
	}
	if count(t, db, "orders") != 1 {
		t.Fatal("order row missing")
	}
	// Save of an existing row: the UPDATE path.
	o.Pay(6)
	must(t, db.Save(o).Error)
	wantTypes(t, db, "doc.changed", "order.placed", "order.paid", "order.paid")
	wantNoPending(t, o, d)
}

func testSavePresetKeyRollsBackTogether(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	o := NewOrder()
	err := db.Transaction(func(tx *gorm.DB) error {
		must(t, tx.Save(o).Error) // UPDATE 0 rows, then INSERT, in tx
		return errBoom
	})
	wantErrIs(t, err, errBoom)
	if count(t, db, "orders") != 0 || count(t, db, "outbox_messages") != 0 {
		t.Fatal("rolled back save left rows")
	}
	wantPending(t, o, 1)
}

func testUpdates(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	o := NewOrder()
	must(t, db.Create(o).Error)

	o.Record(OrderPaid{OrderID: o.ID, Amount: 1})
	must(t, db.Model(o).Updates(Order{Status: "paid"}).Error)
	o.Record(OrderPaid{OrderID: o.ID, Amount: 2})
	must(t, db.Model(o).Updates(map[string]any{"status": "paid2"}).Error)
	o.Record(OrderPaid{OrderID: o.ID, Amount: 3})
	must(t, db.Model(o).Update("status", "paid3").Error)
	rows := wantTypes(t, db, "order.placed", "order.paid", "order.paid", "order.paid")
	for i, r := range rows[1:] {
		if got := decode(t, r.Payload)["Amount"]; got != float64(i+1) {
			t.Fatalf("row %d amount = %v", i, got)
		}
		if r.AggregateID != o.ID.String() {
			t.Fatalf("row %d aggregate id %q", i, r.AggregateID)
		}
	}
	wantNoPending(t, o)

	// An update that matches no row writes no events: they stay pending.
	ghost := &Order{ID: uuid.New()}
	ghost.Pay(1)
	must(t, db.Model(ghost).Updates(map[string]any{"status": "x"}).Error)
	wantTypes(t, db, "order.placed", "order.paid", "order.paid", "order.paid")
	wantPending(t, ghost, 1)
}

func testDeleteAndSoftDelete(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	o := NewOrder()
	must(t, db.Create(o).Error)
	o.Record(OrderPaid{OrderID: o.ID})
	must(t, db.Delete(o).Error)
	if count(t, db, "orders") != 0 {
		t.Fatal("order not deleted")
	}

	d := &Doc{Title: "x"}
	must(t, db.Create(d).Error)
	d.Record(DocEvent{Note: "deleted"})
	must(t, db.Delete(d).Error)
	var n int64
	must(t, db.Model(&Doc{}).Count(&n).Error)
	if n != 0 || count(t, db, "docs") != 1 {
		t.Fatal("doc not soft deleted")
	}
	rows := wantTypes(t, db, "order.placed", "order.paid", "doc.changed")
	if rows[2].AggregateID != fmt.Sprint(d.ID) {
		t.Fatalf("soft delete event aggregate id %q", rows[2].AggregateID)
	}
	wantNoPending(t, o, d)
}

func testAssociations(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	o := NewOrder()
	o.Lines = []Line{{ID: uuid.New(), SKU: "a"}, {ID: uuid.New(), SKU: "b"}}
	o.Lines[0].Ship()
	o.Lines[1].Ship()
	must(t, db.Create(o).Error)
	rows := wantTypes(t, db, "line.shipped", "line.shipped", "order.placed")
	if rows[0].AggregateType != "Line" || rows[0].AggregateID != o.Lines[0].ID.String() {
		t.Fatalf("child row = %+v", rows[0])
	}
	wantNoPending(t, o, &o.Lines[0], &o.Lines[1])

	// Existing children saved with FullSaveAssociations (their rows are upserted).
	o.Lines[0].Ship()
	o.Pay(3)
	must(t, db.Session(&gorm.Session{FullSaveAssociations: true}).Save(o).Error)
	wantTypes(t, db, "line.shipped", "line.shipped", "order.placed", "line.shipped", "order.paid")
	wantNoPending(t, o, &o.Lines[0])

	// A failing parent rolls the children's events back with it.
	o2 := NewOrder()
	o2.ID = o.ID // duplicate key
	o2.Lines = []Line{{ID: uuid.New()}}
	o2.Lines[0].Ship()
	if err := db.Create(o2).Error; err == nil {
		t.Fatal("duplicate create succeeded")
	}
	wantTypes(t, db, "line.shipped", "line.shipped", "order.placed", "line.shipped", "order.paid")
	wantPending(t, &o2.Lines[0], 1)
}

func testUserTransaction(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	a, b := NewOrder(), NewOrder()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(a).Error; err != nil {
			return err
		}
		return tx.Create(b).Error
	}))
	wantTypes(t, db, "order.placed", "order.placed")

	c := NewOrder()
	err := db.Transaction(func(tx *gorm.DB) error {
		must(t, tx.Create(c).Error)
		return errBoom
	})
	wantErrIs(t, err, errBoom)
	wantTypes(t, db, "order.placed", "order.placed")
	if count(t, db, "orders") != 2 {
		t.Fatal("rolled back order kept")
	}
}

func testNestedSavepointRollback(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	outer, inner := NewOrder(), NewOrder()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(outer).Error; err != nil {
			return err
		}
		err := tx.Transaction(func(tx2 *gorm.DB) error {
			must(t, tx2.Create(inner).Error)
			return errBoom
		})
		wantErrIs(t, err, errBoom)
		return nil
	}))
	rows := wantTypes(t, db, "order.placed")
	if rows[0].AggregateID != outer.ID.String() {
		t.Fatal("wrong event kept")
	}
	// The inner aggregate's events were rolled back with its savepoint: a later
	// save of it writes them.
	wantPending(t, inner, 1)
	must(t, db.Create(inner).Error)
	wantTypes(t, db, "order.placed", "order.placed")
	wantNoPending(t, inner)
}

func testSavepointRollbackThenResaveInSameTx(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	o := NewOrder()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		_ = tx.Transaction(func(tx2 *gorm.DB) error {
			must(t, tx2.Create(o).Error)
			return errBoom
		})
		return tx.Create(o).Error // same transaction, the savepoint's rows are gone
	}))
	wantTypes(t, db, "order.placed")
}

func testManualBeginCommit(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	o := NewOrder()
	tx := db.Begin()
	must(t, tx.Create(o).Error)
	o.Pay(1)
	must(t, tx.Save(o).Error)
	if n := count(t, db, "outbox_messages"); n != 0 {
		t.Fatalf("uncommitted events visible: %d", n)
	}
	must(t, tx.Commit().Error)
	wantTypes(t, db, "order.placed", "order.paid")

	o2 := NewOrder()
	tx = db.Begin()
	must(t, tx.Create(o2).Error)
	must(t, tx.Rollback().Error)
	wantTypes(t, db, "order.placed", "order.paid")
	wantPending(t, o2, 1)
}

func testPrepareStmt(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, &gorm.Config{PrepareStmt: true})
	o := NewOrder()
	must(t, db.Create(o).Error)
	o.Pay(1)
	must(t, db.Save(o).Error)
	must(t, db.Transaction(func(tx *gorm.DB) error {
		o.Pay(2)
		if err := tx.Save(o).Error; err != nil {
			return err
		}
		return tx.Transaction(func(tx2 *gorm.DB) error {
			o.Pay(3)
			return tx2.Save(o).Error
		})
	}))
	wantTypes(t, db, "order.placed", "order.paid", "order.paid", "order.paid")
}

func testSkipDefaultTransaction(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, &gorm.Config{SkipDefaultTransaction: true})
	o := NewOrder()
	must(t, db.Create(o).Error)
	o.Pay(1)
	must(t, db.Save(o).Error)
	wantTypes(t, db, "order.placed", "order.paid")
	wantNoPending(t, o)

	// The write is atomic: when the outbox insert fails, the business row goes too.
	testkit.RefuseValue(t, db, "outbox_messages", "type", "big")
	o2 := NewOrder()
	o2.Record(Big{Data: "x"})
	if err := db.Create(o2).Error; err == nil {
		t.Fatal("create succeeded despite the outbox insert failing")
	}
	var n int64
	must(t, db.Model(&Order{}).Where("id = ?", o2.ID).Count(&n).Error)
	if n != 0 {
		t.Fatal("business row written without its events")
	}
	wantPending(t, o2, 2)

	// Per-session SkipDefaultTransaction too.
	db2 := setup(t, dl, outboxhook.Config{}, nil)
	s := db2.Session(&gorm.Session{SkipDefaultTransaction: true})
	o3 := NewOrder()
	must(t, s.Create(o3).Error)
	wantTypes(t, db2, "order.placed")
	wantNoPending(t, o3)
}

func testDryRun(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	o := NewOrder()
	must(t, db.Session(&gorm.Session{DryRun: true}).Create(o).Error)
	if count(t, db, "orders") != 0 || count(t, db, "outbox_messages") != 0 {
		t.Fatal("dry run wrote")
	}
	wantPending(t, o, 1)
}

func testSameAggregateTwiceInOneTransaction(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	o := NewOrder()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(o).Error; err != nil {
			return err
		}
		o.Pay(1)
		if err := tx.Save(o).Error; err != nil {
			return err
		}
		return tx.Save(o).Error
	}))
	wantTypes(t, db, "order.placed", "order.paid")
	// The next save (another transaction) learns that one committed.
	o.Pay(2)
	must(t, db.Save(o).Error)
	wantTypes(t, db, "order.placed", "order.paid", "order.paid")
	wantNoPending(t, o)
}

func testRolledBackSaveRetried(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	o := NewOrder()
	o.Pay(7)
	for range 2 {
		err := db.Transaction(func(tx *gorm.DB) error {
			must(t, tx.Create(o).Error)
			return errBoom
		})
		wantErrIs(t, err, errBoom)
	}
	if count(t, db, "outbox_messages") != 0 {
		t.Fatal("rolled back events visible")
	}
	wantPending(t, o, 2)
	pending := o.Records()
	must(t, db.Transaction(func(tx *gorm.DB) error { return tx.Create(o).Error }))
	rows := wantTypes(t, db, "order.placed", "order.paid")
	if rows[0].ID != pending[0].ID || rows[1].ID != pending[1].ID {
		t.Fatal("retry wrote events under new ids")
	}
	must(t, db.Save(o).Error)
	wantTypes(t, db, "order.placed", "order.paid")
	wantNoPending(t, o)
}

func testConcurrentSaves(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := NewOrder()
			if err := db.Create(o).Error; err != nil {
				errs <- err
				return
			}
			o.Pay(1)
			errs <- db.Save(o).Error
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	if n := count(t, db, "outbox_messages"); n != 100 {
		t.Fatalf("outbox has %d rows, want 100", n)
	}
	var dup int64
	must(t, db.Raw(`SELECT count(*) FROM (SELECT aggregate_id FROM outbox_messages GROUP BY aggregate_id HAVING count(*) <> 2) x`).Scan(&dup).Error)
	if dup != 0 {
		t.Fatalf("%d aggregates without exactly 2 events", dup)
	}
}

func testSavePresetKeyInsertFailsWritesNothing(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	testkit.RefuseValue(t, db, "orders", "status", "invalid")
	o := NewOrder()
	o.Status = "invalid"
	// UPDATE touches no row and commits; the INSERT then fails. The events must
	// not have been written by the UPDATE's transaction.
	if err := db.Save(o).Error; err == nil {
		t.Fatal("save succeeded")
	}
	if count(t, db, "outbox_messages") != 0 {
		t.Fatal("events written without their row (ghost events)")
	}
	wantPending(t, o, 1)
	o.Status = "new"
	must(t, db.Save(o).Error)
	wantTypes(t, db, "order.placed")
}

func testCommitFailureKeepsEventsPending(t *testing.T, dl testkit.Dialect) {
	if !dl.SQL.DeferredConstraints() {
		t.Skip("the database checks every constraint at once: its COMMIT cannot fail on one")
	}
	db := setup(t, dl, outboxhook.Config{}, nil)
	must(t, db.Exec(`CREATE TABLE statuses (name varchar(20) PRIMARY KEY)`).Error)
	must(t, db.Exec(`CREATE TABLE guarded_orders (id varchar(36) PRIMARY KEY,
		status varchar(20) REFERENCES statuses (name) DEFERRABLE INITIALLY DEFERRED)`).Error)
	o := &GuardedOrder{ID: uuid.New(), Status: "new"} // "new" is not in statuses: the COMMIT fails
	o.Record(OrderPlaced{OrderID: o.ID})
	if err := db.Create(o).Error; err == nil {
		t.Fatal("commit succeeded")
	}
	if count(t, db, "outbox_messages") != 0 {
		t.Fatal("events of a failed commit visible")
	}
	wantPending(t, o, 1)
	must(t, db.Exec(`INSERT INTO statuses VALUES ('new')`).Error)
	must(t, db.Create(o).Error)
	wantTypes(t, db, "order.placed")
	wantNoPending(t, o)
}

// GuardedOrder's status must name a row of statuses, checked at COMMIT.
type GuardedOrder struct {
	ID     uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	Status string
	aggregate.Root
}

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
func testSkipDefaultTransactionHookEvents(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{MaxPayloadBytes: 1024}, nil)
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
	// Good input: both written.
	good := &HookRecorder{}
	must(t, skip.Create(good).Error)
	if count(t, db, "hook_recorders") != 1 {
		t.Fatal("row missing")
	}
	wantTypes(t, db, "doc.changed")
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
func testHookContextPassedToAnotherDB(t *testing.T, dl testkit.Dialect) {
	if dl.SQL.OneWriter() {
		t.Skip("one writer: another connection cannot write while the hook's transaction holds the write lock")
	}
	for _, skip := range []bool{false, true} {
		t.Run(map[bool]string{false: "default transaction", true: "SkipDefaultTransaction"}[skip], func(t *testing.T) {
			t.Parallel()
			dsn := dl.NewDSN(t)
			// A transaction left open (the bug this guards against) is ended by the
			// server after 3 s, so that the test fails instead of hanging.
			dsn = dl.SQL.IdleTxTimeout(dsn, 3*time.Second)
			open := func(gcfg *gorm.Config) *gorm.DB {
				db := dl.Open(t, dsn, gcfg)
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
func testCopiedByValue(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
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
func testAggregateByValue(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
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
func testIdentifiedEmptyID(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
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
func testPartialMultiRowDelete(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
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

// 9b. An upsert writes the events of the rows it wrote, and only those, in
// every form. DO NOTHING on an existing row writes no row and no event, and
// the events stay pending (PostgreSQL and SQLite count the row as not
// affected); over several rows of which only some were written it fails with
// ErrPartialWrite. MySQL renders DO NOTHING as ON DUPLICATE KEY UPDATE pk = pk
// and, with clientFoundRows (which Herald requires), counts the row it left
// alone as affected: nothing tells a write from no write, so there such an
// upsert of aggregates with pending events fails with ErrAmbiguousUpsert
// before anything is written. UpdateAll and DoUpdates write the row, inserted
// or updated: its events are written, on every database.
func testUpsertWritesOnlyWrittenRows(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	drv, derr := drivers.For(db)
	must(t, derr)
	foundRows := drv.Caps().Has(store.FoundRows) // counts a row left alone as affected
	doNothing := clause.OnConflict{DoNothing: true}
	existing := NewOrder()
	must(t, db.Create(existing).Error)
	placed := []string{"order.placed"}
	want := func(more ...string) {
		t.Helper()
		placed = append(placed, more...)
		wantTypes(t, db, placed...)
	}
	status := func(id uuid.UUID) string {
		t.Helper()
		var s string
		must(t, db.Session(&gorm.Session{NewDB: true}).Raw(`SELECT status FROM orders WHERE id = ?`, id).Scan(&s).Error)
		return s
	}
	nothingWritten := func(err error, target error) {
		t.Helper()
		if foundRows {
			target = outboxhook.ErrAmbiguousUpsert
		}
		if target == nil {
			must(t, err)
		} else {
			wantErrIs(t, err, target)
		}
	}

	// DO NOTHING on an existing row: no row written, no event.
	dup := &Order{ID: existing.ID, Status: "dup"}
	dup.Record(OrderPaid{OrderID: dup.ID, Amount: 1})
	nothingWritten(db.Clauses(doNothing).Create(dup).Error, nil)
	want()
	wantPending(t, dup, 1)
	if s := status(existing.ID); s != "new" {
		t.Fatalf("status = %q after DO NOTHING", s)
	}
	// DO NOTHING of a new row: written, with its events (refused on MySQL).
	fresh := NewOrder()
	err := db.Clauses(doNothing).Create(fresh).Error
	if foundRows {
		wantErrIs(t, err, outboxhook.ErrAmbiguousUpsert)
		wantPending(t, fresh, 1)
		if count(t, db, "orders") != 1 {
			t.Fatal("the refused upsert wrote its row")
		}
	} else {
		must(t, err)
		want("order.placed")
		wantNoPending(t, fresh)
	}
	// Over two rows of which one exists: which one was written is unknown.
	again := &Order{ID: existing.ID, Status: "again"}
	again.Record(OrderPaid{OrderID: existing.ID, Amount: 2})
	other := NewOrder()
	before := count(t, db, "orders")
	nothingWritten(db.Clauses(doNothing).Create(&[]*Order{again, other}).Error, outboxhook.ErrPartialWrite)
	want()
	wantPending(t, other, 1)
	if n := count(t, db, "orders"); n != before || status(existing.ID) != "new" {
		t.Fatalf("%d orders, status %q after a failed DO NOTHING", n, status(existing.ID))
	}
	// DO NOTHING without pending events is nobody's business.
	quiet := &Order{ID: existing.ID, Status: "quiet"}
	must(t, db.Clauses(doNothing).Create(quiet).Error)
	want()

	// UpdateAll and DoUpdates write the row, existing or new: its events too.
	up := &Order{ID: existing.ID, Status: "updated"}
	up.Record(OrderPaid{OrderID: up.ID, Amount: 3})
	must(t, db.Clauses(clause.OnConflict{UpdateAll: true}).Create(up).Error)
	want("order.paid")
	wantNoPending(t, up)
	if s := status(existing.ID); s != "updated" {
		t.Fatalf("status = %q after UpdateAll", s)
	}
	setStatus := clause.OnConflict{Columns: []clause.Column{{Name: "id"}}, DoUpdates: clause.AssignmentColumns([]string{"status"})}
	du := &Order{ID: existing.ID, Status: "shipped"}
	du.Record(OrderPaid{OrderID: du.ID, Amount: 4})
	must(t, db.Clauses(setStatus).Create(du).Error)
	want("order.paid")
	if s := status(existing.ID); s != "shipped" {
		t.Fatalf("status = %q after DoUpdates", s)
	}
	// The same values again: the row is written (unchanged), as by Save.
	same := &Order{ID: existing.ID, Status: "shipped"}
	same.Record(OrderPaid{OrderID: same.ID, Amount: 5})
	must(t, db.Clauses(setStatus).Create(same).Error)
	want("order.paid")
	// A DoUpdates whose condition fails leaves the row alone where the
	// database renders the condition (PostgreSQL, SQLite: the count is 0,
	// the events stay pending); MySQL's dialector has no condition and
	// updates the row.
	cond := setStatus
	cond.Where = clause.Where{Exprs: []clause.Expression{clause.Expr{SQL: "orders.status = ?", Vars: []any{"no such status"}}}}
	skipped := &Order{ID: existing.ID, Status: "skipped"}
	skipped.Record(OrderPaid{OrderID: skipped.ID, Amount: 6})
	must(t, db.Clauses(cond).Create(skipped).Error)
	if foundRows {
		want("order.paid")
		wantNoPending(t, skipped)
	} else {
		want()
		wantPending(t, skipped, 1)
		if s := status(existing.ID); s != "shipped" {
			t.Fatalf("status = %q after a DoUpdates whose condition failed", s)
		}
	}
	n1, n2 := NewOrder(), NewOrder()
	must(t, db.Clauses(clause.OnConflict{UpdateAll: true}).Create(n1).Error)
	must(t, db.Clauses(setStatus).Create(n2).Error)
	want("order.placed", "order.placed")
	// Several rows, some existing, some new: every row is written.
	both := &Order{ID: existing.ID, Status: "both"}
	both.Record(OrderPaid{OrderID: both.ID, Amount: 7})
	n3 := NewOrder()
	must(t, db.Clauses(clause.OnConflict{UpdateAll: true}).Create(&[]*Order{both, n3}).Error)
	want("order.paid", "order.placed")
	wantNoPending(t, both, n3)

	// An event a hook records in the statement, after the check before the
	// write: the same (on MySQL the statement has run: it is rolled back).
	must(t, db.AutoMigrate(&HookRecorder{}))
	h := &HookRecorder{}
	must(t, db.Create(h).Error)
	want("doc.changed")
	hd := &HookRecorder{ID: h.ID}
	nothingWritten(db.Clauses(doNothing).Create(hd).Error, nil)
	want()
	wantPending(t, hd, 1)
}

// 10. CreateInBatches: the events are forgotten when its transaction commits,
// as in every transaction GORM opens itself.
func testCreateInBatchesForgetsAtCommit(t *testing.T, dl testkit.Dialect) {
	var notified atomic.Int64
	db := setup(t, dl, outboxhook.Config{Notify: func() { notified.Add(1) }}, nil)
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
	ID       uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	ParentID uuid.UUID `gorm:"type:varchar(36)"`
	aggregate.Root
}

func (p *Part) AggregateType() string { return "Order" }
func (p *Part) AggregateID() string   { return p.ParentID.String() }

// 11. Per aggregate, insertion order (seq, which the ordered relay publishes
// in) is commit order, also when the writers share no row: the second writer
// waits for the first.
func testAggregateWritersSerialized(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
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
		for _, r := range outbox(t, db) {
			if note, _ := decode(t, r.Payload)["Note"].(string); r.AggregateID == parent.String() && strings.HasPrefix(note, via+"-") {
				notes = append(notes, note)
			}
		}
		if strings.Join(notes, ",") != strings.Join(commit, ",") {
			t.Fatalf("%s: outbox order %v, commit order %v", via, notes, commit)
		}
	}
}

// 12. A *gorm.DB returned by a write and reused for another: the second write is
// judged on its own, its events forgotten at its commit, and Notify called.
func testReusedResultHandle(t *testing.T, dl testkit.Dialect) {
	var notified atomic.Int64
	db := setup(t, dl, outboxhook.Config{Notify: func() { notified.Add(1) }}, nil)
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
func testAddMessagesIDs(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
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
func testMixedCaseTable(t *testing.T, dl testkit.Dialect) {
	dsn := dl.NewDSN(t)
	for range 2 { // the second plugin finds the table the first created
		db := dl.Open(t, dsn, nil)
		must(t, db.Use(outboxhook.New(outboxhook.Config{Table: "OutBox"})))
		must(t, db.AutoMigrate(&Order{}))
		must(t, db.Create(NewOrder()).Error)
		must(t, outboxhook.Add(db, DocEvent{}))
	}
	db := dl.Open(t, dsn, nil)
	if n := testkit.Count(t, db, "OutBox"); n != 4 {
		t.Fatalf(`"OutBox" has %d rows, want 4`, n)
	}
	var tables, outboxes []string
	must(t, db.Raw(dl.SQL.Tables()).Scan(&tables).Error)
	for _, name := range tables {
		if strings.EqualFold(name, "outbox") {
			outboxes = append(outboxes, name)
		}
	}
	if len(outboxes) != 1 {
		t.Fatalf("tables named outbox in any case: %v", outboxes)
	}
}

// A savepoint rolled back inside a hook of a statement GORM wrapped in its own
// transaction takes the events written after it with it.
func testSavepointRolledBackInHook(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
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

// Bad input fails the save with a wrapped error, and nothing is written: neither
// the business row nor any event.
func testBadInput(t *testing.T, dl testkit.Dialect) {
	cases := []struct {
		name   string
		event  events.Event
		target error
	}{
		{"channel field", WithChan{C: make(chan int)}, outboxhook.ErrEncode},
		{"NaN", WithFloat{F: nan}, outboxhook.ErrEncode},
		{"empty type", NoType{}, events.ErrEmptyType},
		{"oversize payload", Big{Data: strings.Repeat("x", 2048)}, outboxhook.ErrPayloadTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := setup(t, dl, outboxhook.Config{MaxPayloadBytes: 1024}, nil)
			for _, run := range []struct {
				name string
				save func(db *gorm.DB, o *Order) error
			}{
				{"default tx", func(db *gorm.DB, o *Order) error { return db.Create(o).Error }},
				{"user tx", func(db *gorm.DB, o *Order) error {
					return db.Transaction(func(tx *gorm.DB) error { return tx.Create(o).Error })
				}},
				{"no tx", func(db *gorm.DB, o *Order) error {
					return db.Session(&gorm.Session{SkipDefaultTransaction: true}).Create(o).Error
				}},
				{"update", func(db *gorm.DB, o *Order) error {
					must(t, db.Session(&gorm.Session{NewDB: true}).Exec(`INSERT INTO orders (id, status) VALUES (?, 'new')`, o.ID).Error)
					defer db.Session(&gorm.Session{NewDB: true}).Exec(`DELETE FROM orders`)
					if err := db.Model(o).Update("status", "changed").Error; err != nil {
						var status string
						must(t, db.Session(&gorm.Session{NewDB: true}).Raw(`SELECT status FROM orders`).Scan(&status).Error)
						if status != "new" {
							t.Errorf("update kept despite the error")
						}
						return err
					}
					return nil
				}},
			} {
				o := NewOrder()
				o.Record(c.event)
				err := run.save(db, o)
				wantErrIs(t, err, c.target)
				if run.name != "update" && count(t, db, "orders") != 0 {
					t.Fatalf("%s: business row written", run.name)
				}
				if count(t, db, "outbox_messages") != 0 {
					t.Fatalf("%s: events written", run.name)
				}
			}
		})
	}
}

// Hooked records an event its encoding refuses from its AfterCreate hook: the
// failure is found after the row was written.
type Hooked struct {
	ID uint `gorm:"primaryKey"`
	aggregate.Root
}

func (h *Hooked) AfterCreate(*gorm.DB) error {
	h.Record(WithFloat{F: nan})
	return nil
}

// A transaction the caller opened cannot commit the business row when its events
// could not be written, even if the caller ignores the error.
func testFailureAfterWriteAbortsCallersTransaction(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&Hooked{}))
	h := &Hooked{}
	h.Record(DocEvent{})
	tx := db.Begin()
	wantErrIs(t, tx.Create(h).Error, outboxhook.ErrEncode)
	_ = tx.Commit() // ignoring the error: PostgreSQL rolls back
	if count(t, db, "hookeds") != 0 || count(t, db, "outbox_messages") != 0 {
		t.Fatal("the caller committed the row without its events")
	}
	// In a transaction GORM opened, the same failure rolls back as usual.
	h2 := &Hooked{}
	wantErrIs(t, db.Create(h2).Error, outboxhook.ErrEncode)
	if count(t, db, "hookeds") != 0 {
		t.Fatal("row kept")
	}
}

type Keyless struct {
	ID   uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	Name string
	aggregate.Root
}

type SelfNamed struct {
	Code string `gorm:"primaryKey"`
	aggregate.Root
}

func (s *SelfNamed) AggregateType() string { return "catalog.item" }
func (s *SelfNamed) AggregateID() string   { return "item-" + s.Code }

func testEmptyAggregateID(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&Keyless{}, &SelfNamed{}))
	k := &Keyless{Name: "no id"} // zero uuid, no database default
	k.Record(DocEvent{})
	wantErrIs(t, db.Create(k).Error, outboxhook.ErrEmptyAggregateID)
	if count(t, db, "keylesses") != 0 || count(t, db, "outbox_messages") != 0 {
		t.Fatal("written despite the empty id")
	}

	s := &SelfNamed{Code: "a"}
	s.Record(DocEvent{})
	must(t, db.Create(s).Error)
	rows := wantTypes(t, db, "doc.changed")
	if rows[0].AggregateType != "catalog.item" || rows[0].AggregateID != "item-a" {
		t.Fatalf("row = %+v", rows[0])
	}
}

func testTableMissingWithoutAutoCreate(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{DisableAutoCreate: true}, nil)
	o := NewOrder()
	wantErrIs(t, db.Create(o).Error, outboxhook.ErrTableMissing)
	if count(t, db, "orders") != 0 {
		t.Fatal("business row written without the outbox table")
	}
	wantErrIs(t, outboxhook.Add(db, DocEvent{}), outboxhook.ErrTableMissing)
}

func testAdd(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	must(t, db.Transaction(func(tx *gorm.DB) error {
		return outboxhook.Add(tx, DocEvent{Note: "a"}, DocEvent{Note: "b"})
	}))
	_ = db.Transaction(func(tx *gorm.DB) error {
		must(t, outboxhook.Add(tx, DocEvent{Note: "rolled back"}))
		return errBoom
	})
	must(t, outboxhook.Add(db, OrderPaid{Amount: 1})) // no transaction: one statement
	rows := wantTypes(t, db, "doc.changed", "doc.changed", "order.paid")
	if rows[0].AggregateType != "" || rows[0].AggregateID != "" || decode(t, rows[1].Payload)["Note"] != "b" {
		t.Fatalf("rows = %+v", rows)
	}
	wantErrIs(t, outboxhook.Add(db, WithChan{}), outboxhook.ErrEncode)

	plain := dl.OpenNew(t, nil)
	wantErrIs(t, outboxhook.Add(plain, DocEvent{}), outboxhook.ErrNotRegistered)
}

func testMetadataAndTopic(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{
		Topic: func(env *events.Envelope) string { return "svc." + env.AggregateType + "." + env.Type },
	}, nil)
	ctx := events.WithMetadata(context.Background(), events.Metadata{"correlation_id": "c-1", "actor": "ctx"})
	o := &Order{ID: uuid.New()}
	o.RecordWithMetadata(OrderPlaced{OrderID: o.ID}, events.Metadata{"actor": "record"})
	must(t, db.WithContext(ctx).Create(o).Error)
	must(t, outboxhook.Add(db.WithContext(ctx), DocEvent{}))
	rows := wantTypes(t, db, "order.placed", "doc.changed")
	md := rows[0].Metadata
	if md["correlation_id"] != "c-1" || md["actor"] != "record" {
		t.Fatalf("metadata = %v", md)
	}
	if rows[0].Topic != "svc.Order.order.placed" || rows[1].Topic != "svc..doc.changed" {
		t.Fatalf("topics = %q, %q", rows[0].Topic, rows[1].Topic)
	}
}

type V2Event struct{ A int }

func (V2Event) EventType() string { return "v2" }
func (V2Event) EventVersion() int { return 2 }

func testVersion(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	must(t, outboxhook.Add(db, V2Event{A: 1}))
	if rows := wantTypes(t, db, "v2"); rows[0].Version != 2 {
		t.Fatalf("version = %d", rows[0].Version)
	}
}

// The trace context of the saving request is stored with each event, as W3C
// traceparent/tracestate metadata; without a span nothing is added.
func testTraceContextStored(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	ts, err := trace.ParseTraceState("vendor=abc")
	must(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	const want = "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
	must(t, db.WithContext(ctx).Create(NewOrder()).Error)
	must(t, outboxhook.Add(db.WithContext(ctx), DocEvent{}))
	copied := message.NewMessage(uuid.NewString(), []byte(`{}`))
	copied.Metadata.Set(events.MetaTraceParent, "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01")
	must(t, db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return outboxhook.AddMessages(tx, "t", copied) }))
	must(t, db.Create(NewOrder()).Error) // no span
	rows := outbox(t, db)
	for i, r := range rows {
		md := r.Metadata
		if i < 3 && (md[events.MetaTraceParent] != want || md[events.MetaTraceState] != "vendor=abc") {
			t.Fatalf("row %d metadata = %v", i, md)
		}
		if i == 3 && len(md) != 0 {
			t.Fatalf("metadata without a span = %v", md)
		}
	}
}

// Named is an event whose type is its Name.
type Named struct {
	Name string `json:"-"`
}

func (n Named) EventType() string { return n.Name }

// NotJSON is a codec that does not produce JSON, against the Codec contract.
type NotJSON struct{}

func (NotJSON) Marshal(events.Event) ([]byte, error) { return []byte("not json"), nil }
func (NotJSON) Unmarshal([]byte, any) error          { return errors.New("not json") }

// Input that one of the databases cannot store (a NUL character, which
// PostgreSQL's jsonb refuses; metadata larger than MariaDB's TEXT column;
// invalid UTF-8, which PostgreSQL and MariaDB refuse) fails the save on every
// database alike, with a Herald error, and writes nothing; input at the limits
// is stored, unchanged, on every database.
func testUnstorableInput(t *testing.T, dl testkit.Dialect) {
	const mdLimit = 65535 // outboxhook.MaxMetadataBytes: MariaDB's TEXT column
	db := setup(t, dl, outboxhook.Config{}, nil)
	bg := context.Background()
	md := func(k, v string) context.Context { return events.WithMetadata(bg, events.Metadata{k: v}) }
	nothingWritten := func(t *testing.T) {
		t.Helper()
		if count(t, db, "orders") != 0 || count(t, db, "outbox_messages") != 0 {
			t.Fatal("written despite the error")
		}
	}
	// The metadata {"k":"..."} is 8 bytes and the value.
	atLimit := strings.Repeat("m", mdLimit-8)
	for _, c := range []struct {
		name   string
		ctx    context.Context
		event  events.Event
		target error
	}{
		{"NUL in payload", bg, DocEvent{Note: "a\x00b"}, outboxhook.ErrEncode},
		{"NUL in metadata value", md("k", "a\x00b"), DocEvent{}, outboxhook.ErrEncode},
		{"NUL in metadata key", md("k\x00", "v"), DocEvent{}, outboxhook.ErrEncode},
		{"invalid UTF-8 in metadata", md("k", "a\xffb"), DocEvent{}, outboxhook.ErrEncode},
		// What no broker's header carries (an AMQP header name is at most 255 bytes).
		{"metadata key of 256 bytes", md(strings.Repeat("k", 256), "v"), DocEvent{}, outboxhook.ErrEncode},
		{"colon in metadata key", md("a:b", "v"), DocEvent{}, outboxhook.ErrEncode},
		{"line feed in metadata key", md("a\nb", "v"), DocEvent{}, outboxhook.ErrEncode},
		{"line break in metadata value", md("k", "a\r\nInjected: 1"), DocEvent{}, outboxhook.ErrEncode},
		{"metadata one byte over MariaDB's TEXT", md("k", atLimit+"m"), DocEvent{}, outboxhook.ErrPayloadTooLarge},
		{"200 KB of metadata", md("k", strings.Repeat("m", 200<<10)), DocEvent{}, outboxhook.ErrPayloadTooLarge},
		// The text columns: VARCHAR(255) on MariaDB.
		{"type of 256 characters", bg, Named{strings.Repeat("é", 256)}, outboxhook.ErrEncode},
		{"NUL in type", bg, Named{"a\x00b"}, outboxhook.ErrEncode},
		{"invalid UTF-8 in type", bg, Named{"a\xffb"}, outboxhook.ErrEncode},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := NewOrder()
			o.Record(c.event)
			wantErrIs(t, db.WithContext(c.ctx).Create(o).Error, c.target)
			wantErrIs(t, outboxhook.Add(db.WithContext(c.ctx), c.event), c.target)
			nothingWritten(t)
		})
	}
	for _, c := range []struct {
		name    string
		topic   string
		payload string
		md      message.Metadata
		target  error
	}{
		{"message payload with \\u0000", "out", `{"a":"x\u0000"}`, nil, outboxhook.ErrEncode},
		{"message payload with a lone high surrogate", "out", `{"a":"\ud800"}`, nil, outboxhook.ErrEncode},
		{"message payload with a lone low surrogate", "out", `{"a":"\udc00x"}`, nil, outboxhook.ErrEncode},
		{"message payload with invalid UTF-8", "out", "{\"a\":\"\xff\"}", nil, outboxhook.ErrEncode},
		{"message metadata with NUL", "out", `{}`, message.Metadata{"k": "\x00"}, outboxhook.ErrEncode},
		{"message metadata with invalid UTF-8", "out", `{}`, message.Metadata{"k": "\xc3"}, outboxhook.ErrEncode},
		{"message metadata key of 256 bytes", "out", `{}`, message.Metadata{strings.Repeat("k", 256): "v"}, outboxhook.ErrEncode},
		{"200 KB of message metadata", "out", `{}`, message.Metadata{"k": strings.Repeat("m", 200<<10)}, outboxhook.ErrPayloadTooLarge},
		{"NUL in topic", "a\x00b", `{}`, nil, outboxhook.ErrEncode},
		{"topic of 256 characters", strings.Repeat("t", 256), `{}`, nil, outboxhook.ErrEncode},
		{"invalid UTF-8 in aggregate id", "out", `{}`, message.Metadata{events.MetaType: "x", events.MetaAggregateID: "\xff"}, outboxhook.ErrEncode},
		{"aggregate type of 256 characters", "out", `{}`, message.Metadata{events.MetaType: "x", events.MetaAggregateType: strings.Repeat("t", 256)}, outboxhook.ErrEncode},
		{"NUL in aggregate id", "out", `{}`, message.Metadata{events.MetaType: "x", events.MetaAggregateID: "\x00"}, outboxhook.ErrEncode},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := message.NewMessage(uuid.NewString(), []byte(c.payload))
			m.Metadata = c.md
			wantErrIs(t, outboxhook.AddMessages(db, c.topic, m), c.target)
			err := db.Transaction(func(tx *gorm.DB) error { return outboxhook.AddMessages(tx, c.topic, m) })
			wantErrIs(t, err, c.target)
			nothingWritten(t)
		})
	}

	t.Run("not JSON from the codec", func(t *testing.T) {
		db := setup(t, dl, outboxhook.Config{Codec: NotJSON{}}, nil)
		o := NewOrder()
		o.Record(DocEvent{})
		wantErrIs(t, db.Create(o).Error, outboxhook.ErrEncode)
		if count(t, db, "orders") != 0 || count(t, db, "outbox_messages") != 0 {
			t.Fatal("written despite the error")
		}
	})

	// At the limits, and what only looks like a NUL: stored, unchanged, everywhere.
	o := NewOrder()
	o.Record(DocEvent{Note: `\u0000`}) // a backslash and five characters
	must(t, db.WithContext(md("k", atLimit)).Create(o).Error)
	full := Big{Data: strings.Repeat("x", outboxhook.DefaultMaxPayloadBytes-len(`{"Data":""}`))}
	must(t, outboxhook.Add(db, full))
	pair := message.NewMessage(uuid.NewString(), []byte(`{"a":"\ud83d\ude00"}`))
	pair.Metadata = message.Metadata{"k": "\u202e\x1b[2J ünïcode", strings.Repeat("k", outboxhook.MaxMetadataKeyBytes): "longest key"}
	must(t, outboxhook.AddMessages(db, "out", pair))
	longest := strings.Repeat("é", 255)
	must(t, outboxhook.Add(db, Named{longest}))
	rows := wantTypes(t, db, "order.placed", "doc.changed", "big", "message", longest)[1:]
	if got := decode(t, rows[0].Payload)["Note"]; got != `\u0000` {
		t.Errorf("payload note = %q", got)
	}
	if got := rows[0].Metadata["k"]; got != atLimit {
		t.Errorf("metadata at the limit came back %d bytes", len(got))
	}
	if got := decode(t, rows[1].Payload)["Data"]; got != full.Data {
		t.Errorf("payload at the limit came back changed")
	}
	if got := decode(t, rows[2].Payload)["a"]; got != "\U0001F600" {
		t.Errorf("surrogate pair payload = %q", got)
	}
	if got := rows[2].Metadata["k"]; got != "\u202e\x1b[2J ünïcode" {
		t.Errorf("message metadata = %q", got)
	}
	if got := rows[2].Metadata[strings.Repeat("k", outboxhook.MaxMetadataKeyBytes)]; got != "longest key" {
		t.Errorf("metadata under the longest key = %q", got)
	}
}

// A payload of the largest size MaxPayloadBytes may be set to is stored on
// every database with its default settings (MariaDB's max_allowed_packet,
// 16 MiB, refused one of 32 MiB).
func testPayloadAtMaxLimit(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{MaxPayloadBytes: outboxhook.MaxPayloadLimit}, nil)
	full := Big{Data: strings.Repeat("x", outboxhook.MaxPayloadLimit-len(`{"Data":""}`))}
	must(t, outboxhook.Add(db, full))
	if got := decode(t, wantTypes(t, db, "big")[0].Payload)["Data"]; got != full.Data {
		t.Fatal("the payload came back changed")
	}
}
