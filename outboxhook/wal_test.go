package outboxhook_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
)

// StorageWAL is refused where the database cannot keep it: the shared
// server (wal_level=replica) with ErrWALLevel, SQLite with
// ErrStorageNotSupported; an unknown Storage by Validate.
func TestWALStorageChecks(t *testing.T) {
	t.Parallel()
	cfg := outboxhook.Config{Storage: outboxhook.StorageWAL}
	var level string
	db := pgtest.Open(t, nil)
	must(t, db.Raw(`SHOW wal_level`).Scan(&level).Error)
	if level != "logical" {
		err := db.Use(outboxhook.New(cfg))
		if !errors.Is(err, outboxhook.ErrWALLevel) {
			t.Errorf("db.Use on wal_level=%s = %v, want ErrWALLevel", level, err)
		}
	}
	lite := openSQLite(t, sqliteDrivers[0], "file:"+filepath.Join(t.TempDir(), "a.db")+"?"+sqliteDrivers[0].settings)
	if err := lite.Use(outboxhook.New(cfg)); !errors.Is(err, outboxhook.ErrStorageNotSupported) {
		t.Errorf("db.Use on SQLite = %v, want ErrStorageNotSupported", err)
	}
	if err := (outboxhook.Config{Storage: 7}).Validate(); err == nil {
		t.Error("Validate accepted Storage 7")
	}
	if got := outboxhook.New(outboxhook.Config{}).Config(); got.Storage != outboxhook.StorageTable || got.WALPrefix != "herald" {
		t.Errorf("defaults: Storage %v, WALPrefix %q", got.Storage, got.WALPrefix)
	}
}

// setupWAL opens a database of the logical-level server with the plugin in
// StorageWAL and a test_decoding slot.
func setupWAL(t *testing.T) (*gorm.DB, string) {
	t.Helper()
	t.Parallel()
	db, _ := logicaltest.Open(t, nil)
	must(t, db.Use(outboxhook.New(outboxhook.Config{Storage: outboxhook.StorageWAL})))
	must(t, db.AutoMigrate(&Order{}))
	return db, logicaltest.TestDecodingSlot(t, db)
}

// walEvents decodes the events the slot holds since the last call.
func walEvents(t *testing.T, db *gorm.DB, slot string) []events.Envelope {
	t.Helper()
	var out []events.Envelope
	d, err := drivers.For(db)
	must(t, err)
	for _, c := range logicaltest.Messages(t, db, slot, outboxhook.DefaultWALPrefix) {
		row, err := d.WAL().Decode([]byte(c))
		must(t, err)
		env, err := outbound.Envelope(&row)
		must(t, err)
		out = append(out, env)
	}
	return out
}

func wantWAL(t *testing.T, db *gorm.DB, slot string, want ...string) []events.Envelope {
	t.Helper()
	got := walEvents(t, db, slot)
	types := make([]string, len(got))
	for i, e := range got {
		types[i] = e.Type
	}
	if len(types) != len(want) {
		t.Fatalf("WAL events = %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("WAL events = %v, want %v", types, want)
		}
	}
	return got
}

// Every GORM write path emits its events in the saving transaction, as the
// envelope a row would hold; nothing is written to an outbox table.
func TestWALWritePaths(t *testing.T) {
	db, slot := setupWAL(t)
	ctx := events.WithMetadata(context.Background(), events.Metadata{"tenant": "t1"})

	o := NewOrder()
	must(t, db.WithContext(ctx).Create(o).Error)
	got := wantWAL(t, db, slot, "order.placed")
	e := got[0]
	if e.AggregateID != o.ID.String() || e.Topic != "order.placed" || e.Metadata["tenant"] != "t1" ||
		e.Version != 1 || e.OccurredAt.IsZero() || string(e.Payload) != `{"OrderID":"`+o.ID.String()+`"}` {
		t.Fatalf("envelope = %+v", e)
	}
	if n := len(o.Events()); n != 0 {
		t.Fatalf("%d events still pending after the commit", n)
	}

	o.Pay(5)
	must(t, db.Save(o).Error)
	o.Pay(6)
	must(t, db.Model(o).Updates(map[string]any{"status": "paid again"}).Error)
	o.Pay(7)
	must(t, db.Delete(o).Error)
	wantWAL(t, db, slot, "order.paid", "order.paid", "order.paid")

	// db.Transaction with a nested transaction rolled back to its savepoint.
	a, b := NewOrder(), NewOrder()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(a).Error; err != nil {
			return err
		}
		_ = tx.Transaction(func(tx2 *gorm.DB) error {
			if err := tx2.Create(b).Error; err != nil {
				return err
			}
			return errors.New("undo b")
		})
		return nil
	}))
	got = wantWAL(t, db, slot, "order.placed")
	if got[0].AggregateID != a.ID.String() {
		t.Fatalf("published %s, want a's event", got[0].AggregateID)
	}
	if len(b.Events()) != 1 {
		t.Fatal("b forgot the event of its rolled-back savepoint")
	}

	// An explicit rollback emits nothing; the event stays pending.
	c := NewOrder()
	tx := db.Begin()
	must(t, tx.Create(c).Error)
	must(t, tx.Rollback().Error)
	wantWAL(t, db, slot)
	if len(c.Events()) != 1 {
		t.Fatal("c forgot the event of its rolled-back transaction")
	}
	must(t, db.Create(c).Error)
	wantWAL(t, db, slot, "order.placed")

	// Add and AddMessages, in and out of a transaction.
	must(t, outboxhook.Add(db, OrderPaid{Amount: 1}, OrderPaid{Amount: 2}))
	must(t, db.Transaction(func(tx *gorm.DB) error {
		m := message.NewMessage("0190a4e2-7a1c-7000-8000-000000000001", []byte(`{"x":1}`))
		m.Metadata.Set("k", "v")
		return outboxhook.AddMessages(tx, "replies", m)
	}))
	_ = db.Transaction(func(tx *gorm.DB) error {
		must(t, outboxhook.Add(tx, OrderPaid{Amount: 3}))
		return errors.New("roll back")
	})
	got = wantWAL(t, db, slot, "order.paid", "order.paid", outboxhook.DefaultMessageType)
	if m := got[2]; m.ID.String() != "0190a4e2-7a1c-7000-8000-000000000001" || m.Topic != "replies" || m.Metadata["k"] != "v" {
		t.Fatalf("message envelope = %+v", m)
	}

	var table *string
	must(t, db.Raw(`SELECT to_regclass('outbox_messages')::text`).Scan(&table).Error)
	if table != nil {
		t.Fatalf("StorageWAL made table %s", *table)
	}
}

// Without GORM's default transaction the plugin opens its own, and with
// CreateInBatches every batch's events go in its batch's statement.
func TestWALOwnTransactionAndBatches(t *testing.T) {
	t.Parallel()
	db, _ := logicaltest.Open(t, &gorm.Config{SkipDefaultTransaction: true})
	must(t, db.Use(outboxhook.New(outboxhook.Config{Storage: outboxhook.StorageWAL})))
	must(t, db.AutoMigrate(&Order{}))
	slot := logicaltest.TestDecodingSlot(t, db)

	o := NewOrder()
	must(t, db.Create(o).Error)
	wantWAL(t, db, slot, "order.placed")
	if len(o.Events()) != 0 {
		t.Fatal("event still pending after its own transaction committed")
	}
	gone := &Order{ID: NewOrder().ID}
	gone.Pay(1)
	must(t, db.Delete(gone).Error) // no row: nothing written, the event stays
	wantWAL(t, db, slot)
	if len(gone.Events()) != 1 {
		t.Fatal("the event of a delete that wrote no row was forgotten")
	}

	orders := []*Order{NewOrder(), NewOrder(), NewOrder()}
	must(t, db.CreateInBatches(orders, 2).Error)
	got := wantWAL(t, db, slot, "order.placed", "order.placed", "order.placed")
	for i, o := range orders {
		if got[i].AggregateID != o.ID.String() {
			t.Fatalf("event %d of aggregate %s, want %s", i, got[i].AggregateID, o.ID)
		}
	}
}

// In a transaction the plugin cannot watch (a *sql.Tx begun beside GORM
// and handed to it as the pool), the next save asks the server whether it
// committed: committed events are forgotten, rolled-back ones written again.
func TestWALUnwatchedTransaction(t *testing.T) {
	t.Parallel()
	db, _ := logicaltest.Open(t, nil)
	must(t, db.Use(outboxhook.New(outboxhook.Config{Storage: outboxhook.StorageWAL})))
	must(t, db.AutoMigrate(&Order{}))
	slot := logicaltest.TestDecodingSlot(t, db)
	sqlDB, err := db.DB()
	must(t, err)
	inTx := func(o *Order, commit bool) {
		t.Helper()
		stx, err := sqlDB.Begin()
		must(t, err)
		g := db.Session(&gorm.Session{Context: context.Background()}) // a statement of its own
		g.Statement.ConnPool = stx
		must(t, g.Create(o).Error)
		if commit {
			must(t, stx.Commit())
		} else {
			must(t, stx.Rollback())
		}
	}

	kept, undone := NewOrder(), NewOrder()
	inTx(kept, true)
	if len(kept.Events()) != 1 {
		t.Fatal("the transaction was watched: this test needs one that is not")
	}
	inTx(undone, false)
	wantWAL(t, db, slot, "order.placed")

	kept.Pay(1)
	must(t, db.Save(kept).Error)
	wantWAL(t, db, slot, "order.paid") // placed committed: not written again
	must(t, db.Create(undone).Error)
	wantWAL(t, db, slot, "order.placed") // rolled back: written again
}

// A ROLLBACK TO the plugin does not read exactly leaves the transaction's
// events pending, since the WAL holds no rows to look them up: the next save
// emits them again (at worst twice), and none is lost.
func TestWALUnreadRollbackKeepsEvents(t *testing.T) {
	db, slot := setupWAL(t)
	a, b := NewOrder(), NewOrder()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		must(t, tx.Create(a).Error)
		must(t, tx.Exec(`SAVEPOINT `+strings.Repeat("s", 63)+`_a`).Error)
		must(t, tx.Create(b).Error)
		// PostgreSQL cuts names at 63 bytes: this is the savepoint set above.
		return tx.Exec(`ROLLBACK TO ` + strings.Repeat("s", 63) + `_b`).Error
	}))
	wantWAL(t, db, slot, "order.placed")
	if len(a.Events()) != 1 || len(b.Events()) != 1 {
		t.Fatalf("pending after the commit: a %d, b %d; want 1 each", len(a.Events()), len(b.Events()))
	}
	must(t, db.Save(a).Error)
	must(t, db.Create(b).Error)
	got := wantWAL(t, db, slot, "order.placed", "order.placed")
	if got[0].AggregateID != a.ID.String() || got[1].AggregateID != b.ID.String() {
		t.Fatalf("emitted %s, %s; want a's, then b's", got[0].AggregateID, got[1].AggregateID)
	}
}

// The WAL keeps no event for later: a scheduled event (a time or a key)
// fails its save with ErrScheduledWAL and nothing is written; Cancel and
// Move say so too.
func TestWALRefusesScheduledEvents(t *testing.T) {
	db, slot := setupWAL(t)
	o := NewOrder()
	o.Schedule(OrderPaid{OrderID: o.ID, Amount: 1}, events.After(time.Hour))
	if err := db.Create(o).Error; !errors.Is(err, outboxhook.ErrScheduledWAL) {
		t.Fatalf("save of a scheduled event in WAL mode = %v, want ErrScheduledWAL", err)
	}
	err := db.Transaction(func(tx *gorm.DB) error {
		return outboxhook.Schedule(tx, events.After(time.Minute).Keyed("k"), OrderPaid{Amount: 2})
	})
	if !errors.Is(err, outboxhook.ErrScheduledWAL) {
		t.Fatalf("Schedule in WAL mode = %v, want ErrScheduledWAL", err)
	}
	if _, err := outboxhook.CancelKey(db, "k"); !errors.Is(err, outboxhook.ErrScheduledWAL) {
		t.Fatalf("CancelKey in WAL mode = %v, want ErrScheduledWAL", err)
	}
	// The zero Schedule is no schedule: published at the commit.
	must(t, db.Transaction(func(tx *gorm.DB) error {
		return outboxhook.Schedule(tx, events.Schedule{}, OrderPaid{Amount: 3})
	}))
	wantWAL(t, db, slot, "order.paid")
}
