package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type Account struct {
	ID      uuid.UUID `gorm:"type:uuid;primaryKey"`
	Balance int
	aggregate.Root
}

type Deposited struct {
	AccountID uuid.UUID
	Seq       int
}

func (Deposited) EventType() string { return "account.deposited" }

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

func (e *env) pending() int64 {
	e.t.Helper()
	var n int64
	if err := e.db.Raw(`SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL`).Scan(&n).Error; err != nil {
		e.t.Fatal(err)
	}
	return n
}

// run starts a relay and stops it when the test ends (or at stop). returned
// tells whether Run returned before it was cancelled, which it never should.
func (e *env) run(r *relay.Relay) (returned *atomic.Bool, stop func()) {
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
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				e.t.Error("Run did not return within 30s of cancel")
			}
		})
	}
	e.t.Cleanup(stop)
	return returned, stop
}

func quietLogger() *slog.Logger {
	if os.Getenv("HERALD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// received records what a subscriber got, in order.
type received struct {
	mu   sync.Mutex
	msgs []*message.Message
	ids  map[string]int
}

func (r *received) add(m *message.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = map[string]int{}
	}
	r.msgs = append(r.msgs, m)
	r.ids[m.UUID]++
}

func (r *received) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

func (r *received) snapshot() []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*message.Message(nil), r.msgs...)
}

// consume subscribes to topic and records every message, acking it.
func consume(t *testing.T, sub message.Subscriber, topic string) *received {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	got := &received{}
	go func() {
		for m := range ch {
			got.add(m)
			m.Ack()
		}
	}()
	return got
}

// newGoChannel returns an in-process pub/sub that delivers in publish order
// (without BlockPublishUntilSubscriberAck it hands each message to a goroutine).
func newGoChannel() *gochannel.GoChannel {
	return gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 100000, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func idSet(m map[uuid.UUID][]uuid.UUID) map[string]bool {
	out := map[string]bool{}
	for _, ids := range m {
		for _, id := range ids {
			out[id.String()] = true
		}
	}
	return out
}

// checkOrder fails if the first deliveries of any aggregate's events arrived out
// of their commit order. Redeliveries (duplicates) are allowed anywhere.
func checkOrder(t *testing.T, ids map[uuid.UUID][]uuid.UUID, got *received) {
	t.Helper()
	if n := orderViolations(ids, got.snapshot()); n > 0 {
		t.Fatalf("%d order violations", n)
	}
}

func orderViolations(ids map[uuid.UUID][]uuid.UUID, msgs []*message.Message) int {
	first := map[string]int{}
	for i, m := range msgs {
		if _, ok := first[m.UUID]; !ok {
			first[m.UUID] = i
		}
	}
	bad := 0
	for _, evs := range ids {
		last := -1
		for _, id := range evs {
			pos, ok := first[id.String()]
			if !ok {
				continue
			}
			if pos < last {
				bad++
			}
			last = pos
		}
	}
	return bad
}

var _ = fmt.Sprint
