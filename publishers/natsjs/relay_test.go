package natsjs_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/publishers/natsjs"
	"github.com/heraldgo/herald/relay"
)

// refuseOnce passes calls through to a Publisher, but the first time it sees
// the message Target it sends it with a Nats-Expected-Stream header no stream
// matches, so JetStream itself refuses it, in the middle of the call's
// window. It records that first result.
type refuseOnce struct {
	*natsjs.Publisher
	Target  string
	seen    atomic.Bool
	mu      sync.Mutex
	refused error
	at, of  int // the target's index in its call, and the call's length
}

// PublishBatch passes the call through, the target spoilt the first time.
func (r *refuseOnce) PublishBatch(ctx context.Context, topic string, msgs ...*message.Message) []error {
	i := slices.IndexFunc(msgs, func(m *message.Message) bool { return m.UUID == r.Target })
	if i < 0 || !r.seen.CompareAndSwap(false, true) {
		return r.Publisher.PublishBatch(ctx, topic, msgs...)
	}
	msgs = slices.Clone(msgs)
	spoilt := msgs[i].Copy()
	spoilt.Metadata.Set(jetstream.ExpectedStreamHeader, "herald_no_such_stream")
	msgs[i] = spoilt
	errs := r.Publisher.PublishBatch(ctx, topic, msgs...)
	r.mu.Lock()
	r.refused, r.at, r.of = errs[i], i, len(msgs)
	r.mu.Unlock()
	return errs
}

var _ relay.BatchPublisher = (*refuseOnce)(nil)

// Herald's relay through the Publisher to a watermill-nats subscriber: every
// event arrives with its id as the message UUID, and in ordered mode each
// aggregate's first copies come in commit order, also when the broker
// refuses one event in the middle of a window once (the event of the 20th
// of 40 aggregates in the third layer: its later events wait for its retry).
func TestRelayThroughPublisher(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		mode := map[bool]string{true: "ordered", false: "unordered"}[ordered]
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			topic := newTopic(t, "relay_"+mode)
			db := testkit.SQLite.OpenNew(t, nil)
			got := subscribe(t, topic)
			pub := &refuseOnce{Publisher: newPublisher(t, natsjs.Config{AutoProvision: true})}
			r, err := relay.New(db, pub, relay.Config{Ordered: ordered, Logger: testkit.Quiet(),
				PollInterval: 50 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake,
				Topic: func(*events.Envelope) string { return topic }})))
			testkit.Must(t, db.AutoMigrate(&testkit.Account{}))

			ids := map[uuid.UUID][]uuid.UUID{}
			for i := range 40 {
				a := &testkit.Account{ID: uuid.New()}
				for k := range 5 {
					a.Record(testkit.Deposited{AccountID: a.ID, Seq: k})
				}
				for _, rec := range a.Records() {
					ids[a.ID] = append(ids[a.ID], rec.ID)
				}
				if i == 20 {
					pub.Target = ids[a.ID][2].String()
				}
				testkit.Must(t, db.Create(a).Error)
			}
			returned, _ := testkit.Run(t, r.Run)
			want := testkit.IDSet(ids)
			testkit.Eventually(t, 60*time.Second, "200 events", func() bool { return got.HasAll(want) })
			testkit.Eventually(t, 10*time.Second, "outbox drained", func() bool { return testkit.Pending(t, db) == 0 })
			if returned.Load() {
				t.Fatal("Run returned")
			}
			pub.mu.Lock()
			refused, at, of := pub.refused, pub.at, pub.of
			pub.mu.Unlock()
			if refused == nil {
				t.Fatal("the target event was not refused by the broker")
			}
			if at == 0 || at == of-1 {
				t.Fatalf("the target was message %d of %d in its call, not in the middle", at, of)
			}
			for _, m := range got.Snapshot() {
				if !want[m.UUID] || m.Metadata.Get(events.MetaID) != m.UUID {
					t.Fatalf("message %s (herald_id %s) is not an event", m.UUID, m.Metadata.Get(events.MetaID))
				}
			}
			if got.Distinct() != len(want) {
				t.Fatalf("%d distinct messages, want %d", got.Distinct(), len(want))
			}
			if ordered {
				testkit.CheckOrder(t, ids, got)
			}
		})
	}
}
