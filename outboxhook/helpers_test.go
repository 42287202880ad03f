package outboxhook_test

import (
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

type Order struct {
	ID     uuid.UUID `gorm:"type:uuid;primaryKey"`
	Status string
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

type OrderPlaced struct{ OrderID uuid.UUID }

func (OrderPlaced) EventType() string { return "order.placed" }

type OrderPaid struct {
	OrderID uuid.UUID
	Amount  int
}

func (OrderPaid) EventType() string { return "order.paid" }

// setup opens a fresh schema with the plugin and the orders table.
func setup(t *testing.T, cfg outboxhook.Config, gcfg *gorm.Config) *gorm.DB {
	t.Helper()
	t.Parallel()
	db := pgtest.Open(t, gcfg)
	must(t, db.Use(outboxhook.New(cfg)))
	must(t, db.AutoMigrate(&Order{}))
	return db
}

func count(t *testing.T, db *gorm.DB, table string) int64 {
	t.Helper()
	return testkit.Count(t, db, table)
}

func must(t *testing.T, err error) { t.Helper(); testkit.Must(t, err) }

// wantTypes checks the outbox's event types, in insertion order.
func wantTypes(t *testing.T, db *gorm.DB, want ...string) {
	t.Helper()
	rows := testkit.Outbox(t, db)
	got := make([]string, len(rows))
	for i, r := range rows {
		got[i] = r.Type
	}
	if len(got) != len(want) {
		t.Fatalf("outbox types = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("outbox types = %v, want %v", got, want)
		}
	}
}
