package relay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// halfFailing is a relay.BatchPublisher that fails, in each PublishBatch
// call, every other message (the 2nd, 4th, ...) the first time it sees it,
// and acknowledges the others. It records every message it was given and
// the order of the acknowledged ones.
type halfFailing struct {
	t       *testing.T
	mu      sync.Mutex
	calls   int
	seen    map[string]int // message UUID: how many calls it was in
	failed  map[string]bool
	acked   []string
	publish int // Publish calls: there must be none
}

var _ relay.BatchPublisher = (*halfFailing)(nil)

func newHalfFailing(t *testing.T) *halfFailing {
	return &halfFailing{t: t, seen: map[string]int{}, failed: map[string]bool{}}
}

func (p *halfFailing) PublishBatch(ctx context.Context, _ string, msgs ...*message.Message) []error {
	if ctx.Err() != nil {
		p.t.Errorf("PublishBatch called with a done context: %v", ctx.Err())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		p.seen[m.UUID]++
		if i%2 == 1 && p.seen[m.UUID] == 1 {
			p.failed[m.UUID] = true
			errs[i] = errors.New("refused: every other message")
			continue
		}
		p.acked = append(p.acked, m.UUID)
	}
	return errs
}

func (p *halfFailing) Publish(string, ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.publish++
	return errors.New("Publish called on a BatchPublisher")
}

func (p *halfFailing) Close() error { return nil }

func (p *halfFailing) snapshot() (seen map[string]int, failed map[string]bool, acked []string, publish int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps(p.seen), maps(p.failed), slices.Clone(p.acked), p.publish
}

func maps[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// A BatchPublisher's per-message results: the relay calls PublishBatch only,
// marks the acknowledged messages published and retries exactly the failed
// ones: each message acknowledged once, the failed ones given again once
// (they succeed the second time), the others never again; in ordered mode
// each aggregate's events still reach the broker in order.
func TestBatchPublisherRetriesExactlyTheFailed(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			e := newEnv(t)
			ids := e.write(20, 3)
			pub := newHalfFailing(t)
			r, err := relay.New(e.db, pub, relay.Config{Ordered: ordered, PollInterval: 20 * time.Millisecond,
				MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
				LeaseDuration: 3 * time.Second, PublishTimeout: time.Second, Logger: quietLogger()})
			testkit.Must(t, err)
			e.run(r)
			eventually(t, 30*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
			seen, failed, acked, publish := pub.snapshot()
			if publish != 0 {
				t.Fatalf("%d Publish calls on a BatchPublisher", publish)
			}
			if len(failed) == 0 {
				t.Fatal("no message failed: the test publisher did not fail every other one")
			}
			want := idSet(ids)
			if len(acked) != len(want) {
				t.Fatalf("%d acknowledgements of %d events: an acknowledged message was published again, or one was lost", len(acked), len(want))
			}
			for _, id := range acked {
				if !want[id] {
					t.Fatalf("acknowledged %s, not one of the events", id)
				}
			}
			for id := range want {
				wantSeen := 1
				if failed[id] {
					wantSeen = 2
				}
				if seen[id] != wantSeen {
					t.Errorf("event %s (failed: %v) given %d times, want %d", id, failed[id], seen[id], wantSeen)
				}
			}
			if ordered {
				pos := map[string]int{}
				for i, id := range acked {
					pos[id] = i
				}
				for agg, evs := range ids {
					for i := 1; i < len(evs); i++ {
						if pos[evs[i].String()] < pos[evs[i-1].String()] {
							t.Fatalf("aggregate %s: event %d acknowledged before event %d", agg, i, i-1)
						}
					}
				}
			}
		})
	}
}

// recordingPolicy kills an event at its second failed attempt, whether or
// not confirmed, and records what it was asked.
type recordingPolicy struct {
	mu    sync.Mutex
	asked []relay.FailedEvent
}

func (p *recordingPolicy) Decide(f relay.FailedEvent) relay.RetryDecision {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, f)
	return relay.RetryDecision{Dead: f.Attempts >= 2, Delay: 10 * time.Millisecond}
}

// Config.RetryPolicy decides: the relay asks it about every failure, with
// the counts after it, and does as it says (here: dead at the second attempt,
// which the default policy would never do to an unconfirmed failure).
func TestRetryPolicyDecides(t *testing.T) {
	e := newEnv(t)
	ids := e.write(1, 4)
	var bad uuid.UUID
	for _, evs := range ids {
		bad = evs[0]
	}
	pub := testkit.PublisherFunc(func(_ string, msgs ...*message.Message) error {
		for _, m := range msgs {
			if m.UUID == bad.String() {
				return errors.New("refused")
			}
		}
		return nil
	})
	policy := &recordingPolicy{}
	r, err := relay.New(e.db, pub, relay.Config{PollInterval: 20 * time.Millisecond, RetryPolicy: policy, Logger: quietLogger()})
	testkit.Must(t, err)
	e.run(r)
	eventually(t, 30*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
	var dead int64
	testkit.Must(t, e.db.Raw(`SELECT count(*) FROM outbox_messages WHERE dead_at IS NOT NULL AND id = ?`, bad.String()).Scan(&dead).Error)
	if dead != 1 {
		t.Fatalf("the refused event is not dead (%d)", dead)
	}
	policy.mu.Lock()
	defer policy.mu.Unlock()
	if len(policy.asked) != 2 {
		t.Fatalf("the policy was asked %d times, want 2: %+v", len(policy.asked), policy.asked)
	}
	strikes := 0
	for i, f := range policy.asked {
		if f.ID != bad.String() || f.Attempts != i+1 || f.Topic != "account.deposited" || f.Err == nil || f.Poison {
			t.Errorf("asked %+v for attempt %d", f, i+1)
		}
		if f.Confirmed {
			strikes++
		}
		if f.Strikes != strikes {
			t.Errorf("attempt %d: %d strikes, want %d", i+1, f.Strikes, strikes)
		}
	}
	// The first failure was in a chunk whose other events were published
	// after it, one by one: confirmed.
	if !policy.asked[0].Confirmed {
		t.Errorf("the first failure is not confirmed: %+v", policy.asked[0])
	}
}

// oneBad is a relay.BatchPublisher that always fails the message bad, with
// err, and acknowledges every other one: in one call for a whole chunk, as a
// pipelining broker publisher does.
type oneBad struct {
	bad string
	err error
}

func (p oneBad) PublishBatch(_ context.Context, _ string, msgs ...*message.Message) []error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if m.UUID == p.bad {
			errs[i] = p.err
		}
	}
	return errs
}

func (p oneBad) Publish(string, ...*message.Message) error {
	return errors.New("Publish called on a BatchPublisher")
}
func (oneBad) Close() error { return nil }

// In unordered mode a batch publisher's calls start together, so no later
// call confirms a failure: a message the broker answered and rejected
// (relay.ErrRejected) is a strike by itself and dies after MaxAttempts; one
// that fails otherwise (a timeout, say) is not confirmed and never dies, as
// in an outage.
func TestBatchPublisherRejectionIsAStrike(t *testing.T) {
	for name, c := range map[string]struct {
		err  error
		dies bool
	}{
		"rejected":    {fmt.Errorf("too large: %w", relay.ErrRejected), true},
		"unconfirmed": {errors.New("ack timed out"), false},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ids := e.write(20, 3)
			var bad string
			for _, evs := range ids {
				bad = evs[1].String() // one aggregate's second event
				break
			}
			r, err := relay.New(e.db, oneBad{bad: bad, err: c.err}, relay.Config{PollInterval: 20 * time.Millisecond,
				MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxAttempts: 3, Logger: quietLogger()})
			testkit.Must(t, err)
			e.run(r)
			if c.dies { // it may die before pending is seen at 1: judge the end state
				eventually(t, 20*time.Second, "every other event published, the rejected one dead", func() bool {
					s, _ := r.Stats(context.Background())
					return e.pending() == 0 && s.Dead == 1
				})
				return
			}
			eventually(t, 20*time.Second, "every other event published", func() bool { return e.pending() == 1 })
			eventually(t, 20*time.Second, "several failed attempts", func() bool { s, _ := r.Stats(context.Background()); return s.Failed >= 6 })
			if s, _ := r.Stats(context.Background()); s.Dead != 0 || s.Pending != 1 {
				t.Fatalf("an unconfirmed failure killed its event: %+v", s)
			}
		})
	}
}
