package amqp_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/publishers/amqp"
	"github.com/heraldgo/herald/relay"
)

// End to end through Herald's relay to a watermill-amqp subscriber: every
// event arrives, and in ordered mode the first copies of each aggregate's
// events arrive in commit order, also when an event in the middle of a
// window is returned unroutable once (its first publish goes out with a
// routing key no queue is bound with) and is retried.
func TestRelayEndToEnd(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		mode := map[bool]string{true: "ordered", false: "unordered"}[ordered]
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			topic := name("e2e_" + mode)
			db := testkit.SQLite.OpenNew(t, nil)
			testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Topic: func(*events.Envelope) string { return topic }})))
			testkit.Must(t, db.AutoMigrate(&testkit.Account{}))

			// The subscriber: the durable pub/sub config on a direct exchange,
			// its queue bound with routing key "ok".
			scfg := wmamqp.NewDurablePubSubConfig(url(), wmamqp.GenerateQueueNameTopicNameWithSuffix("sub"))
			scfg.Exchange.Type = "direct"
			scfg.QueueBind.GenerateRoutingKey = func(string) string { return "ok" }
			t.Cleanup(func() { cleanup(topic, topic+"_sub") })
			sub, err := wmamqp.NewSubscriber(scfg, watermill.NopLogger{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Close() })
			got := testkit.Consume(t, sub, topic)

			// 30 aggregates of 4 events, committed before the relay starts: its
			// ordered windows are each aggregate's next event; the second event
			// of the 15th aggregate, in the middle of the second window, fails
			// its first publish.
			ids := map[uuid.UUID][]uuid.UUID{}
			var order []uuid.UUID
			for range 30 {
				a := &testkit.Account{ID: uuid.New()}
				for i := range 4 {
					a.Record(testkit.Deposited{AccountID: a.ID, Seq: i})
				}
				for _, r := range a.Records() {
					ids[a.ID] = append(ids[a.ID], r.ID)
				}
				order = append(order, a.ID)
				testkit.Must(t, db.Create(a).Error)
			}
			faulty := ids[order[14]][1].String()
			var (
				mu       sync.Mutex
				attempts = map[string]int{}
			)
			pub := newPublisher(t, amqp.Config{ExchangeType: "direct", RoutingKey: func(_ string, m *message.Message) string {
				mu.Lock()
				defer mu.Unlock()
				attempts[m.UUID]++
				if m.UUID == faulty && attempts[m.UUID] == 1 {
					return "nowhere"
				}
				return "ok"
			}})

			r, err := relay.New(db, pub, relay.Config{Ordered: ordered, Logger: testkit.Quiet(),
				MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, PublishTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var returned atomic.Bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				if err := r.Run(ctx); err != nil {
					t.Errorf("Run: %v", err)
				}
				returned.Store(true)
			}()
			t.Cleanup(func() { cancel(); <-done })

			testkit.Eventually(t, 30*time.Second, "120 events", func() bool { return got.Distinct() == 120 })
			if !got.HasAll(testkit.IDSet(ids)) {
				t.Fatal("an event is missing")
			}
			for _, m := range got.Snapshot() {
				if m.Metadata.Get(events.MetaID) != m.UUID {
					t.Fatalf("message UUID %s, herald_id %s", m.UUID, m.Metadata.Get(events.MetaID))
				}
			}
			if ordered {
				testkit.CheckOrder(t, ids, got)
			}
			mu.Lock()
			n := attempts[faulty]
			mu.Unlock()
			if n != 2 {
				t.Fatalf("the faulty event was published %d times, want 2 (returned once, then confirmed)", n)
			}
			if c := got.Count(faulty); c != 1 {
				t.Fatalf("the faulty event arrived %d times, want once", c)
			}
			testkit.Eventually(t, 10*time.Second, "outbox drained", func() bool { return testkit.Pending(t, db) == 0 })
			if returned.Load() {
				t.Fatal("Run returned")
			}
		})
	}
}
