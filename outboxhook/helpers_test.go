package outboxhook_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
)

// Test models: an order aggregate with line aggregates as children, and a
// soft-deletable document with an auto-increment id.

type Order struct {
	ID     uuid.UUID `gorm:"type:uuid;primaryKey"`
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
	ID      uuid.UUID `gorm:"type:uuid;primaryKey"`
	OrderID uuid.UUID `gorm:"type:uuid"`
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

// setup opens a fresh schema with the plugin and the test tables.
func setup(t *testing.T, cfg outboxhook.Config, gcfg *gorm.Config) *gorm.DB {
	t.Helper()
	t.Parallel()
	return setupNoParallel(t, cfg, gcfg)
}

// setupNoParallel is setup for a test that already called t.Parallel.
func setupNoParallel(t *testing.T, cfg outboxhook.Config, gcfg *gorm.Config) *gorm.DB {
	t.Helper()
	db := pgtest.Open(t, gcfg)
	if err := db.Use(outboxhook.New(cfg)); err != nil {
		t.Fatalf("use plugin: %v", err)
	}
	if err := db.AutoMigrate(&Order{}, &Line{}, &Doc{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db
}

type row struct {
	ID            uuid.UUID
	Type          string
	Version       int
	AggregateType string
	AggregateID   string
	Topic         string
	Payload       string
	Metadata      string
}

// outbox returns the outbox rows in insertion order.
func outbox(t *testing.T, db *gorm.DB) []row {
	t.Helper()
	var rows []row
	err := db.Session(&gorm.Session{NewDB: true, SkipDefaultTransaction: true}).Raw(
		`SELECT id, type, version, aggregate_type, aggregate_id, topic, payload::text AS payload, metadata::text AS metadata
		 FROM outbox_messages ORDER BY seq`).Scan(&rows).Error
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	return rows
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
