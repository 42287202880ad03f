package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

func TestMain(m *testing.M) { pgtest.Main(logicaltest.Wrap(m)) }

// OrderPlaced goes to the topic "orders", PaymentTaken to "payments"
// (testkit.OpsTopic).
type (
	OrderPlaced  = testkit.OrderPlaced
	PaymentTaken = testkit.PaymentTaken
)

// env is a test's database with an outbox.
type env struct {
	t  *testing.T
	d  testkit.Dialect
	db *gorm.DB
}

func newEnv(t *testing.T, d testkit.Dialect) *env {
	t.Helper()
	db := d.OpenNew(t, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Topic: testkit.OpsTopic})))
	return &env{t: t, d: d, db: db}
}

// row returns the outbox row id, or fails.
func (e *env) row(id uuid.UUID) testkit.Row {
	e.t.Helper()
	for _, r := range testkit.Outbox(e.t, e.db) {
		if r.ID == id {
			return r
		}
	}
	e.t.Fatalf("no row %s", id)
	return testkit.Row{}
}

func (e *env) exists(id uuid.UUID) bool {
	for _, r := range testkit.Outbox(e.t, e.db) {
		if r.ID == id {
			return true
		}
	}
	return false
}

func (e *env) open(cfg admin.Config) *admin.Outbox {
	e.t.Helper()
	o, err := admin.Open(context.Background(), e.db, cfg)
	testkit.Must(e.t, err)
	return o
}

// add writes events (with metadata) and returns their ids, in order.
func (e *env) add(evs ...events.Event) []uuid.UUID {
	e.t.Helper()
	ctx := events.WithMetadata(context.Background(), events.Metadata{"tenant": "acme"})
	return testkit.AddEvents(e.t, ctx, e.db, evs...)
}

func (e *env) kill(id uuid.UUID, d time.Duration, lastErr string) {
	e.d.KillEvent(e.t, e.db, id, d, lastErr)
}

func (e *env) stamp(id uuid.UUID, column string, d time.Duration) {
	e.d.StampEvent(e.t, e.db, id, column, d)
}

func (e *env) fail(id uuid.UUID) { testkit.FailEvent(e.t, e.db, id) }

// schedule writes events scheduled by s and returns their ids, in order.
func (e *env) schedule(s events.Schedule, evs ...events.Event) []uuid.UUID {
	e.t.Helper()
	return testkit.ScheduleEvents(e.t, e.db, s, evs...)
}

// overdue makes the scheduled event id due since ago.
func (e *env) overdue(id uuid.UUID, ago time.Duration) {
	e.t.Helper()
	e.stamp(id, "due_at", ago)
	e.stamp(id, "available_at", ago)
}
