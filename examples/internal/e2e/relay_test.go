package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// The event id arrives as the message UUID (and in the herald_id metadata) on
// each real broker, in both modes, in order in ordered mode.
func TestRelayRealBrokers(t *testing.T) {
	brokers := brokertest.Brokers()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		for name, connect := range brokers {
			for _, ordered := range []bool{false, true} {
				mode := map[bool]string{false: "unordered", true: "ordered"}[ordered]
				t.Run(name+"/"+mode, func(t *testing.T) {
					t.Parallel()
					topic := brokertest.Topic(mode)
					e := newTopicEnv(t, d, topic)
					pub, sub := connect(t, topic)
					got := consume(t, sub, topic)
					ids := e.write(30, 4)
					r, err := relay.New(e.db, pub, relay.Config{Ordered: ordered, Logger: quietLogger(),
						LeaseDuration: 3 * time.Second, PublishTimeout: time.Second})
					if err != nil {
						t.Fatal(err)
					}
					e.run(r)
					eventually(t, 30*time.Second, "120 events", func() bool { return got.Distinct() == 120 })
					want := idSet(ids)
					for _, m := range got.Snapshot() {
						if !want[m.UUID] || m.Metadata.Get(events.MetaID) != m.UUID {
							t.Fatalf("message UUID %s / %s is not an event id", m.UUID, m.Metadata.Get(events.MetaID))
						}
						if _, err := uuid.Parse(m.UUID); err != nil {
							t.Fatal(err)
						}
					}
					if ordered {
						checkOrder(t, ids, got)
					}
					eventually(t, 5*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
				})
			}
		}
	})
}

// The broker (a private NATS server) killed while events keep coming, and
// started again on the same store: everything arrives.
func TestBrokerOutage(t *testing.T) {
	t.Parallel()
	srv := brokertest.StartNATS(t)
	topic := brokertest.Topic("outage")
	e := newTopicEnv(t, testkit.Postgres, topic)
	pub, _ := brokertest.NATS(t, srv.URL(), topic)
	r, err := relay.New(e.db, pub, relay.Config{PollInterval: 50 * time.Millisecond, PublishTimeout: 500 * time.Millisecond,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, MaxAttempts: 1000, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	returned := e.run(r)
	ids := idSet(e.write(10, 2))
	eventually(t, 20*time.Second, "first events published", func() bool { return e.pending() == 0 })
	srv.Stop()
	for k := range idSet(e.write(10, 2)) {
		ids[k] = true
	}
	time.Sleep(2 * time.Second)
	if e.pending() == 0 {
		t.Fatal("events marked published while the broker was down")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "outbox drained after the broker came back", func() bool { return e.pending() == 0 })
	if returned.Load() {
		t.Fatal("Run returned during the outage")
	}
	// Everything is in the stream: read it back from the start.
	_, sub := brokertest.NATS(t, srv.URL(), topic)
	got := consume(t, sub, topic)
	eventually(t, 20*time.Second, "40 events in the stream", func() bool { return got.Distinct() == 40 })
	for _, m := range got.Snapshot() {
		if !ids[m.UUID] {
			t.Fatalf("unknown message %s", m.UUID)
		}
	}
	s, _ := r.Stats(context.Background())
	if s.Failed == 0 {
		t.Fatal("no failed attempt recorded during the outage")
	}
}
