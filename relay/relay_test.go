package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/relay"
)

func TestRelayGoChannel(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		name := map[bool]string{false: "unordered", true: "ordered"}[ordered]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ids := e.write(20, 5)
			pub := newGoChannel()
			got := consume(t, pub, "account.deposited")
			r, err := relay.New(e.db, pub, relay.Config{Ordered: ordered, BatchSize: 37, Logger: quietLogger(),
				LeaseDuration: 3 * time.Second, PublishTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			e.run(r)
			eventually(t, 20*time.Second, "100 events", func() bool { return got.distinct() == 100 })
			eventually(t, 5*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
			want := idSet(ids)
			for _, m := range got.snapshot() {
				if !want[m.UUID] {
					t.Fatalf("unexpected message %s", m.UUID)
				}
				if m.Metadata.Get(events.MetaID) != m.UUID || m.Metadata.Get(events.MetaType) != "account.deposited" {
					t.Fatalf("metadata = %v", m.Metadata)
				}
			}
			if ordered {
				checkOrder(t, ids, got)
			}
			s, err := r.Stats(context.Background())
			if err != nil || s.Pending != 0 || s.Published != 100 {
				t.Fatalf("stats = %+v, %v", s, err)
			}
		})
	}
}
