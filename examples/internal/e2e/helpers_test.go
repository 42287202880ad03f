package e2e

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) {
	if os.Getenv("HERALD_RELAY_CHILD") != "" {
		runChildRelay() // a relay process started by a test; runs until killed
		return
	}
	pgtest.Main(logicaltest.Wrap(m))
}

// Account and Deposited are the tests' aggregate and event (testkit's).
type (
	Account   = testkit.Account
	Deposited = testkit.Deposited
)

// env is one test's world: a database of the test's own with the outbox, every
// event published to topic.
type env struct {
	t   *testing.T
	d   testkit.Dialect
	db  *gorm.DB
	dsn string
}

func newTopicEnv(t *testing.T, d testkit.Dialect, topic string) *env {
	t.Helper()
	dsn := d.NewDSN(t)
	db := d.Open(t, dsn, nil)
	hook := outboxhook.New(outboxhook.Config{Topic: func(*events.Envelope) string { return topic }})
	testkit.Must(t, db.Use(hook))
	testkit.Must(t, db.AutoMigrate(&Account{}))
	return &env{t: t, d: d, db: db, dsn: dsn}
}

// write commits n accounts with k events each and returns the event ids, in
// order per account.
func (e *env) write(n, k int) map[uuid.UUID][]uuid.UUID {
	e.t.Helper()
	out := map[uuid.UUID][]uuid.UUID{}
	for range n {
		a := &Account{ID: uuid.New()}
		for i := range k {
			a.Record(Deposited{AccountID: a.ID, Seq: i})
		}
		for _, p := range a.Records() {
			out[a.ID] = append(out[a.ID], p.ID)
		}
		testkit.Must(e.t, e.db.Create(a).Error)
	}
	return out
}

func (e *env) pending() int64 {
	e.t.Helper()
	var n int64
	testkit.Must(e.t, e.db.Raw(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL`).Scan(&n).Error)
	return n
}

// run starts a relay and stops it when the test ends. returned tells whether
// Run returned before it was cancelled, which it never should.
func (e *env) run(r *relay.Relay) (returned *atomic.Bool) {
	returned = &atomic.Bool{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			e.t.Errorf("Run returned %v", err)
		}
		returned.Store(ctx.Err() == nil)
	}()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			e.t.Error("Run did not return within 30s of cancel")
		}
	})
	return returned
}

var quietLogger = testkit.Quiet

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, timeout, what, cond)
}

type received = testkit.Received

func consume(t *testing.T, sub message.Subscriber, topic string) *received {
	return testkit.Consume(t, sub, topic)
}

func idSet(m map[uuid.UUID][]uuid.UUID) map[string]bool { return testkit.IDSet(m) }

func checkOrder(t *testing.T, ids map[uuid.UUID][]uuid.UUID, got *received) {
	t.Helper()
	testkit.CheckOrder(t, ids, got)
}

// Effect is what a consumer's handler does: one row per handled message.
type Effect struct {
	ID        uint `gorm:"primaryKey"`
	Consumer  string
	MessageID string
}

// effectsOf counts effect rows per message id.
func effectsOf(t *testing.T, db *gorm.DB) map[string]int {
	t.Helper()
	var rows []Effect
	testkit.Must(t, db.Session(&gorm.Session{NewDB: true}).Find(&rows).Error)
	out := map[string]int{}
	for _, r := range rows {
		out[r.MessageID]++
	}
	return out
}

func runRouter(t *testing.T, r *message.Router) {
	t.Helper()
	testkit.RunRouter(t, r)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 60*time.Second, what, cond)
}
