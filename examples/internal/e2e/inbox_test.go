package e2e

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

type Order struct {
	ID uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	N  int
	aggregate.Root
}

type OrderPaid struct {
	OrderID uuid.UUID
	N       int
}

func (OrderPaid) EventType() string { return "order.paid" }

// duplicating republishes a share of what it publishes, as a broker or a relay
// crash between ack and mark would: same UUID, same metadata.
type duplicating struct {
	message.Publisher
	dups atomic.Int64
}

func (d *duplicating) Publish(topic string, msgs ...*message.Message) error {
	if err := d.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	var again []*message.Message
	for _, m := range msgs {
		if rand.IntN(5) == 0 {
			again = append(again, m.Copy())
		}
	}
	if len(again) > 0 {
		d.dups.Add(int64(len(again)))
		return d.Publisher.Publish(topic, again...)
	}
	return nil
}

// Outbox -> relay -> broker -> router with the inbox, on the real brokers:
// duplicates injected, the handler failing at random 30% of the time (before or
// after its write); every event's effect happens exactly once.
func TestEndToEnd(t *testing.T) {
	brokers := brokertest.Brokers()
	testkit.ForEach(t, func(t *testing.T, d testkit.Dialect) {
		for name, connect := range brokers {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				topic := brokertest.Topic("e2e")
				db := d.OpenNew(t, nil)
				pub, sub := connect(t, topic)
				dup := &duplicating{Publisher: pub}
				r, err := relay.New(db, dup, relay.Config{PollInterval: 50 * time.Millisecond, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				err = db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake, Topic: func(*events.Envelope) string { return topic }}))
				if err != nil {
					t.Fatal(err)
				}
				if err := db.AutoMigrate(&Order{}, &Effect{}); err != nil {
					t.Fatal(err)
				}
				in, err := inbox.New(db, inbox.Config{})
				if err != nil {
					t.Fatal(err)
				}
				router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
				if err != nil {
					t.Fatal(err)
				}
				router.AddMiddleware(in.Middleware)
				var calls, failures atomic.Int64
				router.AddConsumerHandler("count", topic, sub, func(msg *message.Message) error {
					calls.Add(1)
					if rand.IntN(10) < 3 {
						failures.Add(1)
						if rand.IntN(2) == 0 {
							return errors.New("failed before writing")
						}
						_ = inbox.Tx(msg.Context()).Create(&Effect{Consumer: "count", MessageID: msg.UUID}).Error
						return errors.New("failed after writing")
					}
					return inbox.Tx(msg.Context()).Create(&Effect{Consumer: "count", MessageID: msg.UUID}).Error
				})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() { _ = r.Run(ctx) }()
				runRouter(t, router)

				want := map[string]bool{}
				for i := range 40 {
					o := &Order{ID: uuid.New()}
					for j := range 5 {
						o.N = j
						o.Record(OrderPaid{OrderID: o.ID, N: j})
						for _, p := range o.Records() {
							want[p.ID.String()] = true
						}
						if err := db.Save(o).Error; err != nil {
							t.Fatal(err)
						}
					}
					_ = i
				}
				waitFor(t, "200 effects", func() bool { return len(effectsOf(t, db)) == len(want) })
				time.Sleep(500 * time.Millisecond) // late duplicates and redeliveries
				effects := effectsOf(t, db)
				for id := range want {
					if effects[id] != 1 {
						t.Fatalf("event %s: %d effects, want exactly 1", id, effects[id])
					}
				}
				if len(effects) != len(want) {
					t.Fatalf("%d effects for %d events", len(effects), len(want))
				}
				if dup.dups.Load() == 0 || failures.Load() == 0 {
					t.Fatalf("no duplicates (%d) or failures (%d) were injected", dup.dups.Load(), failures.Load())
				}
				t.Logf("%s: %d events, %d handler calls, %d injected duplicates, %d failures; %d effects, each exactly once",
					name, len(want), calls.Load(), dup.dups.Load(), failures.Load(), len(effects))
			})
		}
	})
}
