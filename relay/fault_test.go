package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// A crash between the broker's ack and the mark: the batch is published again,
// under the same UUIDs, and nothing is lost.
func TestFaultBetweenAckAndMark(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			e := newEnv(t)
			pubsub := newGoChannel()
			pub, sub, topic := pubsub, pubsub, "account.deposited"
			got := consume(t, sub, topic)
			ids := e.write(10, 5)
			r, err := relay.New(e.db, pub, relay.Config{Ordered: ordered, BatchSize: 20, PollInterval: 50 * time.Millisecond,
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

// badPublisher fails as told for messages whose payload contains a marker.
type badPublisher struct {
	message.Publisher
	mode string // "error", "panic", "hang"
}

func (p badPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		var d Deposited
		if json.Unmarshal(m.Payload, &d) == nil && d.Seq == 2 {
			switch p.mode {
			case "error":
				return errors.New("broker refused")
			case "panic":
				panic("publisher bug")
			case "hang":
				select {} // never returns
			}
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// A publisher that errors, panics or hangs fails only the events it fails on:
// they go dead after MaxAttempts strikes with the reason; their neighbours are
// published. A strike is a failure the publisher was seen to outlive (a
// Publish call of the same batch that started after it returned succeeded),
// so the test keeps other events flowing (trickle): without other traffic a
// failure cannot be told from an outage and is retried, not killed
// (TestPermanentRefusalIsVisible). In ordered mode the later events of the
// same aggregate wait, then are released when the failing event dies.
//
// A hang costs its batch PublishTimeout twice (the chunk, then the event
// alone). An unordered batch starts no call later than 2 PublishTimeouts after
// its claim, so nothing can publish after the hang in the same batch: the
// hanging events are never confirmed and stay failing, retried, like events
// in an outage (a hang is what an unreachable broker looks like). An ordered
// batch has the rest of its lease (here 3s) and confirms them.
func TestFailingPublisher(t *testing.T) {
	for _, mode := range []string{"error", "panic", "hang"} {
		for _, ordered := range []bool{false, true} {
			t.Run(mode+"/"+map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
				e := newEnv(t)
				ids := e.write(4, 4) // Seq 0..3 per account; Seq 2 fails
				gc := newGoChannel()
				got := consume(t, gc, "account.deposited")
				r, err := relay.New(e.db, badPublisher{gc, mode}, relay.Config{Ordered: ordered, PollInterval: 20 * time.Millisecond,
					MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
					PublishTimeout: 100 * time.Millisecond, LeaseDuration: 3 * time.Second, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				e.run(r)
				stop := e.trickle(20 * time.Millisecond)
				wantDead := 4
				if mode == "hang" && !ordered {
					wantDead = 0
					eventually(t, 20*time.Second, "the hanging events' retries", func() bool {
						s, err := r.Stats(context.Background())
						return err == nil && s.Failing == 4 && s.Failed >= 4*4
					})
				}
				var dead []relay.DeadEvent
				eventually(t, 20*time.Second, fmt.Sprintf("%d dead events", wantDead), func() bool {
					dead, err = r.Dead(context.Background(), 100)
					return err == nil && len(dead) == wantDead
				})
				healthy := stop()
				eventually(t, 20*time.Second, "the good events", func() bool { return got.distinct() == 12+len(healthy) })
				for _, d := range dead {
					var ev Deposited
					if err := json.Unmarshal(d.Payload, &ev); err != nil || ev.Seq != 2 {
						t.Fatalf("dead event %s is not a failing one: %s", d.ID, d.Payload)
					}
					if d.Strikes != 3 || d.Attempts < 3 || d.LastError == "" {
						t.Fatalf("dead event %+v", d)
					}
					want := map[string]string{"error": "broker refused", "panic": "panicked", "hang": "timed out"}[mode]
					if !strings.Contains(d.LastError, want) {
						t.Fatalf("last error %q does not say %q", d.LastError, want)
					}
				}
				if ordered {
					checkOrder(t, ids, got)
				}
				if wantDead == 0 {
					eventually(t, 10*time.Second, "only the hanging events pending", func() bool { return e.pending() == 4 })
					if s, _ := r.Stats(context.Background()); s.Dead != 0 || s.Failing != 4 || s.Pending != 4 {
						t.Fatalf("stats = %+v", s)
					}
					return
				}
				eventually(t, 10*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
				s, _ := r.Stats(context.Background())
				if s.Dead != 4 || s.Pending != 0 || s.Failing != 0 || s.Died != 4 || s.Published != int64(12+len(healthy)) {
					t.Fatalf("stats = %+v; want 4 dead, %d published", s, 12+len(healthy))
				}
			})
		}
	}
}

// Rows whose stored metadata or id cannot be decoded go dead at once with a
// reason, and do not stall their neighbours (nor, ordered, their aggregate's
// later events).
func TestUndecodableRows(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			e := newEnv(t)
			ids := e.write(3, 3)
			var victim uuid.UUID
			for _, evs := range ids {
				victim = evs[0]
				break
			}
			// Valid jsonb that is not a string map.
			if err := e.db.Exec(`UPDATE outbox_messages SET metadata = '{"n": [1,2]}' WHERE id = ?`, victim).Error; err != nil {
				t.Fatal(err)
			}
			gc := newGoChannel()
			got := consume(t, gc, "account.deposited")
			r, err := relay.New(e.db, gc, relay.Config{Ordered: ordered, PollInterval: 20 * time.Millisecond,
				PublishTimeout: time.Second, LeaseDuration: 3 * time.Second, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			e.run(r)
			eventually(t, 10*time.Second, "8 events", func() bool { return got.distinct() == 8 })
			var dead []relay.DeadEvent
			eventually(t, 10*time.Second, "the dead row", func() bool {
				dead, err = r.Dead(context.Background(), 10)
				return err == nil && len(dead) == 1
			})
			if len(dead) != 1 || dead[0].ID != victim || !strings.Contains(dead[0].LastError, "cannot be decoded") {
				t.Fatalf("dead = %+v, %v", dead, err)
			}
			if dead[0].Attempts != 1 {
				t.Fatalf("undecodable row was retried: %d attempts", dead[0].Attempts)
			}
			// Requeue after repair.
			if err := e.db.Exec(`UPDATE outbox_messages SET metadata = '{}' WHERE id = ?`, victim).Error; err != nil {
				t.Fatal(err)
			}
			if err := r.Requeue(context.Background(), victim); err != nil {
				t.Fatal(err)
			}
			if err := r.Requeue(context.Background(), victim); !errors.Is(err, relay.ErrNotDead) {
				t.Fatalf("second requeue: %v", err)
			}
			eventually(t, 10*time.Second, "9 events", func() bool { return got.distinct() == 9 })
		})
	}
}

// A publisher that fails every event is down: the events wait, none dies. One
// that fails some events while publishing others (here: the other traffic of
// a trickle, published after them in the same batches) kills those after
// MaxAttempts strikes; RequeueAll brings them back.
func TestOutageKillsNothingAndRequeueAll(t *testing.T) {
	e := newEnv(t)
	ids := idSet(e.write(2, 2)) // Seq 0, 1
	gc := newGoChannel()
	got := consume(t, gc, "account.deposited")
	var mode atomic.Int32 // 0: down; 1: fails Seq 1 only; 2: fine
	pub := publisherFunc(func(topic string, msgs ...*message.Message) error {
		switch mode.Load() {
		case 0:
			return errors.New("connection refused")
		case 1:
			for _, m := range msgs {
				var d Deposited
				if json.Unmarshal(m.Payload, &d) == nil && d.Seq == 1 {
					return errors.New("rejected")
				}
			}
		}
		return gc.Publish(topic, msgs...)
	})
	r, err := relay.New(e.db, pub, relay.Config{PollInterval: 20 * time.Millisecond, MaxAttempts: 2,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	returned, _ := e.run(r)
	eventually(t, 10*time.Second, "failed publishes", func() bool { s, _ := r.Stats(context.Background()); return s.Failed >= 6 })
	if s, _ := r.Stats(context.Background()); s.Dead != 0 || s.Pending != 4 || s.Failing != 4 {
		t.Fatalf("during the outage: %+v", s)
	}
	mode.Store(1)
	stop := e.trickle(20 * time.Millisecond)
	eventually(t, 10*time.Second, "2 dead", func() bool { s, _ := r.Stats(context.Background()); return s.Dead == 2 })
	for _, id := range stop() {
		ids[id] = true
	}
	eventually(t, 10*time.Second, "all but the 2 dead", func() bool { return got.distinct() == len(ids)-2 })
	mode.Store(2)
	n, err := r.RequeueAll(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("requeued %d, %v", n, err)
	}
	eventually(t, 10*time.Second, "every event", func() bool { return got.distinct() == len(ids) })
	if returned.Load() {
		t.Fatal("Run returned")
	}
}

type publisherFunc func(topic string, msgs ...*message.Message) error

func (f publisherFunc) Publish(topic string, msgs ...*message.Message) error {
	return f(topic, msgs...)
}
func (f publisherFunc) Close() error { return nil }

var (
	_ = pgtest.DSN
	_ = outboxhook.Add
	_ = events.NewID
)

// A publisher whose error is not valid UTF-8 (or is huge) still gets its
// failure recorded: last_error is cleaned and cut.
func TestUnprintablePublisherError(t *testing.T) {
	e := newEnv(t)
	e.write(1, 1)
	pub := publisherFunc(func(string, ...*message.Message) error {
		return errors.New("bad \xff\xfe bytes " + strings.Repeat("x", 5000))
	})
	r, err := relay.New(e.db, pub, relay.Config{PollInterval: 20 * time.Millisecond, MinBackoff: time.Hour, MaxBackoff: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	e.run(r)
	var lastErr string
	eventually(t, 10*time.Second, "the failure recorded", func() bool {
		e.db.Raw(`SELECT coalesce(last_error, '') FROM outbox_messages`).Scan(&lastErr)
		return lastErr != ""
	})
	if !strings.HasPrefix(lastErr, "bad \uFFFD") || len(lastErr) > 2010 {
		t.Fatalf("last_error = %.40q... (%d bytes)", lastErr, len(lastErr))
	}
}
