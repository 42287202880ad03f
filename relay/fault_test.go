package relay_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldgo/herald/relay"
)

// A crash between the broker's ack and the mark: the batch is published again,
// under the same UUIDs, and nothing is lost.
//
// The fault point is a hook internal to package relay (export_test.go), so the
// test lives here, on PostgreSQL only, not in the conformance suite
// (internal/conformance), which runs the relay's other behaviour on every
// database.
func TestFaultBetweenAckAndMark(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			e := newEnv(t)
			pubsub := newGoChannel()
			got := consume(t, pubsub, "account.deposited")
			ids := e.write(10, 5)
			r, err := relay.New(e.db, pubsub, relay.Config{Ordered: ordered, BatchSize: 20, PollInterval: 50 * time.Millisecond,
				Logger: quietLogger(), LeaseDuration: 3 * time.Second, PublishTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var faults atomic.Int32
			relay.SetAfterPublish(r, func() error {
				if faults.Add(1) <= 2 {
					return errors.New("injected crash between ack and mark")
				}
				return nil
			})
			e.run(r)
			eventually(t, 30*time.Second, "50 events", func() bool { return got.distinct() == 50 })
			eventually(t, 10*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
			if n := len(got.snapshot()); n <= 50 {
				t.Fatalf("%d deliveries: the faulted batches were not republished", n)
			}
			want := idSet(ids)
			for _, m := range got.snapshot() {
				if !want[m.UUID] {
					t.Fatalf("republished under a new UUID: %s", m.UUID)
				}
			}
			if ordered {
				checkOrder(t, ids, got)
			}
		})
	}
}
