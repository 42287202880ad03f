package storetest

import (
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

// Test models: an order aggregate with line aggregates as children, and a
// soft-deletable document with an auto-increment id.

type Order struct {
	ID     uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	Status string
	Lines  []Line `gorm:"foreignKey:OrderID"`
	aggregate.Root
}

func NewOrder() *Order {
	o := &Order{ID: uuid.New(), Status: "new"}
	o.Record(OrderPlaced{OrderID: o.ID})
	return o
}

func (o *Order) Pay(amount int) {
	o.Status = "paid"
	o.Record(OrderPaid{OrderID: o.ID, Amount: amount})
}

type Line struct {
	ID      uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	OrderID uuid.UUID `gorm:"type:varchar(36)"`
	SKU     string
	Shipped bool
	aggregate.Root
}

func (l *Line) Ship() {
	l.Shipped = true
	l.Record(LineShipped{LineID: l.ID})
}

type Doc struct {
	ID        uint `gorm:"primaryKey"`
	Title     string
	DeletedAt gorm.DeletedAt
	aggregate.Root
}

type OrderPlaced struct{ OrderID uuid.UUID }

func (OrderPlaced) EventType() string { return "order.placed" }

type OrderPaid struct {
	OrderID uuid.UUID
	Amount  int
}

func (OrderPaid) EventType() string { return "order.paid" }

type LineShipped struct{ LineID uuid.UUID }

func (LineShipped) EventType() string { return "line.shipped" }

type DocEvent struct{ Note string }

func (DocEvent) EventType() string { return "doc.changed" }

// Bad events.
type WithChan struct{ C chan int }

func (WithChan) EventType() string { return "bad.chan" }

type WithFloat struct{ F float64 }

func (WithFloat) EventType() string { return "bad.float" }

type NoType struct{}

func (NoType) EventType() string { return "" }

type Big struct{ Data string }

func (Big) EventType() string { return "big" }

var nan = math.NaN()

// setup opens a database of the test's own with the plugin and the test tables.
func setup(t *testing.T, d testkit.Dialect, cfg outboxhook.Config, gcfg *gorm.Config) *gorm.DB {
	t.Helper()
	db := d.OpenNew(t, gcfg)
	if err := db.Use(outboxhook.New(cfg)); err != nil {
		t.Fatalf("use plugin: %v", err)
	}
	if err := db.AutoMigrate(&Order{}, &Line{}, &Doc{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db
}

type row = testkit.Row

// outbox returns the outbox rows in insertion order.
func outbox(t *testing.T, db *gorm.DB) []row {
	t.Helper()
	return testkit.Outbox(t, db)
}

func types(rows []row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Type
	}
	return out
}

func count(t *testing.T, db *gorm.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Session(&gorm.Session{NewDB: true}).Table(table).Unscoped().Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantTypes(t *testing.T, db *gorm.DB, want ...string) []row {
	t.Helper()
	rows := outbox(t, db)
	got := types(rows)
	if len(got) != len(want) {
		t.Fatalf("outbox types = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("outbox types = %v, want %v", got, want)
		}
	}
	return rows
}

func wantNoPending(t *testing.T, aggs ...aggregate.Aggregate) {
	t.Helper()
	for _, a := range aggs {
		if n := len(a.AggregateRoot().Records()); n != 0 {
			t.Fatalf("%T still holds %d pending events after commit", a, n)
		}
	}
}

func wantPending(t *testing.T, a aggregate.Aggregate, n int) {
	t.Helper()
	if got := len(a.AggregateRoot().Records()); got != n {
		t.Fatalf("%T holds %d pending events, want %d", a, got, n)
	}
}

func wantErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want one wrapping %v", err, target)
	}
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	must(t, json.Unmarshal([]byte(s), &m))
	return m
}

// Effect is what an inbox test's handler does: one row per handled message.
type Effect struct {
	ID        uint `gorm:"primaryKey"`
	Consumer  string
	MessageID string
}

// inboxEnv is one inbox test's world: a database with the outbox plugin and
// the effects table.
type inboxEnv struct {
	t  *testing.T
	db *gorm.DB
}

func newInboxEnv(t *testing.T, dl testkit.Dialect) *inboxEnv {
	t.Helper()
	db := dl.OpenNew(t, nil)
	must(t, db.Use(outboxhook.New(outboxhook.Config{})))
	must(t, db.AutoMigrate(&Effect{}))
	return &inboxEnv{t: t, db: db}
}

func (e *inboxEnv) inbox(cfg inbox.Config) *inbox.Inbox {
	e.t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testkit.Quiet()
	}
	in, err := inbox.New(e.db, cfg)
	must(e.t, err)
	return in
}

// effects counts effect rows per message id.
func (e *inboxEnv) effects() map[string]int {
	e.t.Helper()
	var rows []Effect
	must(e.t, e.db.Session(&gorm.Session{NewDB: true}).Find(&rows).Error)
	out := map[string]int{}
	for _, r := range rows {
		out[r.MessageID]++
	}
	return out
}

func (e *inboxEnv) count(table string) int64 {
	e.t.Helper()
	return testkit.Count(e.t, e.db, table)
}

// recordEffect is a handler that writes one Effect in the inbox's transaction
// and counts its calls.
func recordEffect(calls *atomic.Int64) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		calls.Add(1)
		tx := inbox.Tx(msg.Context())
		return tx.Create(&Effect{Consumer: message.HandlerNameFromCtx(msg.Context()), MessageID: msg.UUID}).Error
	}
}

func noPublish(h message.NoPublishHandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) { return nil, h(msg) }
}

func quiet() *slog.Logger { return testkit.Quiet() }
