package e2e

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// Mixed-case names mean one object everywhere: the hook's table is the relay's,
// the Notifier's channel is the one the relay LISTENs on (polling is left at a
// minute, so only the NOTIFY can carry the events in time), and the inbox
// creates and uses one table.
func TestMixedCaseIdentifiers(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.Schema(t)
	db := pgtest.OpenDSN(t, dsn, nil)
	writer := pgtest.OpenDSN(t, dsn, nil)
	const table, channel = "OutBox", "HeraldWake"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	notifier, err := relay.NewNotifier(writer, relay.NotifierConfig{Channel: channel, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	go notifier.Run(ctx) //nolint:errcheck // returns nil on cancel
	if err := writer.Use(outboxhook.New(outboxhook.Config{Table: table, Notify: notifier.Notify})); err != nil {
		t.Fatal(err)
	}
	if err := writer.AutoMigrate(&Order{}); err != nil {
		t.Fatal(err)
	}
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 100}, watermill.NopLogger{})
	msgs, err := pubsub.Subscribe(ctx, "order.paid")
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(db, pubsub, relay.Config{Table: table, Channel: channel, PollInterval: time.Minute, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	write := func(n int) {
		for i := range n {
			o := &Order{ID: uuid.New(), N: i}
			o.Record(OrderPaid{N: i})
			if err := writer.Create(o).Error; err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			select {
			case m := <-msgs:
				m.Ack()
			case <-time.After(4 * time.Second):
				t.Fatalf("%d of %d events arrived: the NOTIFY did not reach the relay", i, n)
			}
		}
	}
	// After a wake-up that finds nothing (the one at LISTEN) the relay looks
	// again after 1, 4, 16 ... ms, up to 4.1 s and then 16.4 s later: events
	// written between those looks arrive in time only through a NOTIFY.
	write(1)
	time.Sleep(6 * time.Second)
	write(3)
	var n atomic.Int64
	in, err := inbox.New(db, inbox.Config{Table: "InBox", Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	h := in.Middleware(func(*message.Message) ([]*message.Message, error) { n.Add(1); return nil, nil })
	m := message.NewMessage(uuid.NewString(), nil)
	for range 2 {
		if _, err := h(m); err != nil {
			t.Fatal(err)
		}
	}
	if n.Load() != 1 {
		t.Fatalf("handler ran %d times", n.Load())
	}
	cancel()
	<-done
}
