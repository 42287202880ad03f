package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/pgtest"
	sqlitestore "github.com/heraldgo/herald/internal/store/sqlite"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// OrderPlaced goes to the topic "orders", PaymentTaken to "payments".
type OrderPlaced struct{ OrderID string }

func (OrderPlaced) EventType() string { return "order.placed" }

type PaymentTaken struct{ OrderID string }

func (PaymentTaken) EventType() string { return "payment.taken" }

func topicOf(env *events.Envelope) string {
	if env.Type == "payment.taken" {
		return "payments"
	}
	return "orders"
}

// env is a test's database with an outbox.
type env struct {
	t  *testing.T
	d  testkit.Dialect
	db *gorm.DB
}

func newEnv(t *testing.T, d testkit.Dialect) *env {
	t.Helper()
	db := d.OpenNew(t, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Topic: topicOf})))
	return &env{t: t, d: d, db: db}
}

// add writes events (with metadata) and returns their ids, in order.
func (e *env) add(evs ...events.Event) []uuid.UUID {
	e.t.Helper()
	before := len(testkit.Outbox(e.t, e.db))
	ctx := events.WithMetadata(context.Background(), events.Metadata{"tenant": "acme"})
	testkit.Must(e.t, outboxhook.Add(e.db.WithContext(ctx), evs...))
	var ids []uuid.UUID
	for _, r := range testkit.Outbox(e.t, e.db)[before:] {
		ids = append(ids, r.ID)
	}
	return ids
}

// ago is the SQL of the database's time d ago, and its argument.
func (e *env) ago(d time.Duration) (string, any) {
	switch e.d.Name {
	case "postgres":
		return `now() - CAST(? AS float8) * interval '1 microsecond'`, d.Microseconds()
	case "sqlite":
		return sqlitestore.Now + ` - ?`, d.Microseconds()
	default:
		return `UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`, d.Microseconds()
	}
}

// kill makes event id dead since d ago, after 12 attempts that ended in lastErr.
func (e *env) kill(id uuid.UUID, d time.Duration, lastErr string) {
	e.t.Helper()
	at, arg := e.ago(d)
	testkit.Must(e.t, e.db.Exec(`UPDATE outbox_messages SET dead_at = `+at+`, attempts = 12, strikes = 11, last_error = ? WHERE id = ?`,
		arg, lastErr, id.String()).Error)
}

// fail records a failed attempt of the pending event id.
func (e *env) fail(id uuid.UUID) {
	e.t.Helper()
	testkit.Must(e.t, e.db.Exec(`UPDATE outbox_messages SET attempts = attempts + 1, last_error = 'timeout' WHERE id = ?`, id.String()).Error)
}

// stamp sets column (created_at, processed_at) of event id to d ago.
func (e *env) stamp(id uuid.UUID, column string, d time.Duration) {
	e.t.Helper()
	at, arg := e.ago(d)
	testkit.Must(e.t, e.db.Exec(`UPDATE outbox_messages SET `+column+` = `+at+` WHERE id = ?`, arg, id.String()).Error)
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
