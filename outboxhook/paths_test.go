package outboxhook_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/outboxhook"
)

var errBoom = errors.New("boom")

func TestCreateOne(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestCreateSliceAndPointers(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestCreateInBatches(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestSaveZeroAndPresetKey(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestSavePresetKeyRollsBackTogether(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestUpdates(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestDeleteAndSoftDelete(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestAssociations(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestUserTransaction(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestNestedSavepointRollback(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestSavepointRollbackThenResaveInSameTx(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestManualBeginCommit(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestPrepareStmt(t *testing.T) {
	db := setup(t, outboxhook.Config{}, &gorm.Config{PrepareStmt: true})
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

func TestSkipDefaultTransaction(t *testing.T) {
	db := setup(t, outboxhook.Config{}, &gorm.Config{SkipDefaultTransaction: true})
	o := NewOrder()
	must(t, db.Create(o).Error)
	o.Pay(1)
	must(t, db.Save(o).Error)
	wantTypes(t, db, "order.placed", "order.paid")
	wantNoPending(t, o)

	// The write is atomic: when the outbox insert fails, the business row goes too.
	must(t, db.Exec(`ALTER TABLE outbox_messages ADD CONSTRAINT no_big CHECK (type <> 'big')`).Error)
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
	db2 := setupNoParallel(t, outboxhook.Config{}, nil)
	s := db2.Session(&gorm.Session{SkipDefaultTransaction: true})
	o3 := NewOrder()
	must(t, s.Create(o3).Error)
	wantTypes(t, db2, "order.placed")
	wantNoPending(t, o3)
}

func TestDryRun(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	o := NewOrder()
	must(t, db.Session(&gorm.Session{DryRun: true}).Create(o).Error)
	if count(t, db, "orders") != 0 || count(t, db, "outbox_messages") != 0 {
		t.Fatal("dry run wrote")
	}
	wantPending(t, o, 1)
}

func TestSameAggregateTwiceInOneTransaction(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestRolledBackSaveRetried(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestConcurrentSaves(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
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

func TestSavePresetKeyInsertFailsWritesNothing(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, db.Exec(`ALTER TABLE orders ADD CONSTRAINT status_ok CHECK (status <> 'invalid')`).Error)
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

func TestCommitFailureKeepsEventsPending(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, db.Exec(`CREATE TABLE statuses (name text PRIMARY KEY)`).Error)
	must(t, db.Exec(`ALTER TABLE orders ADD CONSTRAINT status_fk FOREIGN KEY (status) REFERENCES statuses (name) DEFERRABLE INITIALLY DEFERRED`).Error)
	o := NewOrder() // status "new" is not in statuses: the COMMIT fails
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

// All events of one statement go in one INSERT: a statement-level trigger counts
// the INSERT statements on the outbox.
func TestOneInsertPerStatement(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, db.Exec(`CREATE TABLE stmt_count (n int NOT NULL); INSERT INTO stmt_count VALUES (0)`).Error)
	must(t, db.Exec(`CREATE FUNCTION count_stmt() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN UPDATE stmt_count SET n = n + 1; RETURN NULL; END$$`).Error)
	must(t, db.Exec(`CREATE TRIGGER count_stmt AFTER INSERT ON outbox_messages FOR EACH STATEMENT EXECUTE FUNCTION count_stmt()`).Error)
	orders := []*Order{NewOrder(), NewOrder(), NewOrder()}
	for _, o := range orders {
		o.Pay(1)
	}
	must(t, db.Create(&orders).Error)
	var n int
	must(t, db.Raw(`SELECT n FROM stmt_count`).Scan(&n).Error)
	if got := count(t, db, "outbox_messages"); got != 6 || n != 1 {
		t.Fatalf("%d events in %d INSERT statements, want 6 in 1", got, n)
	}
}
