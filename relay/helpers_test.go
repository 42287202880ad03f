package relay_test

// Helpers of the tests that stay in package relay: those that need a fault
// point inside it, or PostgreSQL itself (its proxy, pg_terminate_backend,
// LISTEN/NOTIFY). The relay's behaviour on every database is the conformance
// suite's (internal/conformance). Publishers, waits and what a subscriber
// received come from internal/testkit.

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Account and Deposited are the tests' aggregate and event (testkit's).
type (
	Account   = testkit.Account
	Deposited = testkit.Deposited
)

// env is one test's world: a schema with the outbox, and the GORM handle.
type env struct {
	t   *testing.T
	db  *gorm.DB
	dsn string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	db, dsn := pgtest.Setup(t, outboxhook.New(outboxhook.Config{}), &Account{})
	return &env{t: t, db: db, dsn: dsn}
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
		if err := e.db.Create(a).Error; err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

func (e *env) pending() int64 { return testkit.Pending(e.t, e.db) }

// run starts a relay and stops it when the test ends (or at stop). returned
// tells whether Run returned before it was cancelled, which it never should.
func (e *env) run(r *relay.Relay) (returned *atomic.Bool, stop func()) {
	return testkit.Run(e.t, r.Run)
}

func quietLogger() *slog.Logger { return testkit.Quiet() }

// received is what a subscriber got (testkit.Received).
type received struct{ *testkit.Received }

func (r received) distinct() int                { return r.Distinct() }
func (r received) snapshot() []*message.Message { return r.Snapshot() }

// consume subscribes to topic and records every message, acking it.
func consume(t *testing.T, sub message.Subscriber, topic string) received {
	t.Helper()
	return received{testkit.Consume(t, sub, topic)}
}

func newGoChannel() *gochannel.GoChannel { return testkit.NewGoChannel() }

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, timeout, what, cond)
}

func idSet(m map[uuid.UUID][]uuid.UUID) map[string]bool { return testkit.IDSet(m) }

func checkOrder(t *testing.T, ids map[uuid.UUID][]uuid.UUID, got received) {
	t.Helper()
	testkit.CheckOrder(t, ids, got.Received)
}
