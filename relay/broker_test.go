package relay_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/brokertest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// newTopicEnv is newEnv with every event published to one topic of its own.
func newTopicEnv(t *testing.T, topic string) *env {
	t.Helper()
	t.Parallel()
	hook := outboxhook.New(outboxhook.Config{Topic: func(*events.Envelope) string { return topic }})
	db, dsn := pgtest.Setup(t, hook, &Account{})
	return &env{t: t, db: db, dsn: dsn}
}

// The event id arrives as the message UUID (and in the herald_id metadata) on
// each real broker, in both modes, in order in ordered mode.
func TestRelayRealBrokers(t *testing.T) {
	brokers := brokertest.Brokers()
	for name, connect := range brokers {
		for _, ordered := range []bool{false, true} {
			mode := map[bool]string{false: "unordered", true: "ordered"}[ordered]
			t.Run(name+"/"+mode, func(t *testing.T) {
				topic := brokertest.Topic(mode)
				e := newTopicEnv(t, topic)
				pub, sub := connect(t, topic)
				got := consume(t, sub, topic)
				ids := e.write(30, 4)
				r, err := relay.New(e.db, pub, relay.Config{Ordered: ordered, Logger: quietLogger(),
					LeaseDuration: 3 * time.Second, PublishTimeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				e.run(r)
				eventually(t, 30*time.Second, "120 events", func() bool { return got.distinct() == 120 })
				want := idSet(ids)
				for _, m := range got.snapshot() {
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
}
