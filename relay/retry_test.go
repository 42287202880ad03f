package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/relay"
)

// Withdrawn is a second event type; with the default topic (the event type)
// it goes to a topic of its own.
type Withdrawn struct{ AccountID uuid.UUID }

func (Withdrawn) EventType() string { return "account.withdrawn" }

const withdrawnTopic = "account.withdrawn"

func modeName(ordered bool) string {
	return map[bool]string{false: "unordered", true: "ordered"}[ordered]
}

// writeOne commits an account with the event ev makes for it and returns the
// event id.
func (e *env) writeOne(ev func(account uuid.UUID) events.Event) (string, error) {
	a := &Account{ID: uuid.New()}
	a.Record(ev(a.ID))
	id := a.Records()[0].ID.String()
	return id, e.db.Create(a).Error
}

func withdrawn(a uuid.UUID) events.Event { return Withdrawn{AccountID: a} }
func deposited(a uuid.UUID) events.Event { return Deposited{AccountID: a, Seq: 100} }

// trickle writes a Deposited event (Seq 100) every interval, other traffic for
// the relay, until stop is called; stop returns the ids written.
func (e *env) trickle(every time.Duration) (stop func() []string) {
	done := make(chan struct{})
	var (
		ids []string
		wg  sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			id, err := e.writeOne(deposited)
			if err != nil {
				e.t.Errorf("trickle: %v", err)
				return
			}
			ids = append(ids, id)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	stop = func() []string {
		once.Do(func() { close(done); wg.Wait() })
		return ids
	}
	e.t.Cleanup(func() { stop() })
	return stop
}

// strikes returns the highest strike count in the outbox and the dead count.
func (e *env) strikes() (maxStrikes, dead int64) {
	e.t.Helper()
	if err := e.db.Raw(`SELECT coalesce(max(strikes), 0), count(*) FILTER (WHERE dead_at IS NOT NULL) FROM outbox_messages`).
		Row().Scan(&maxStrikes, &dead); err != nil {
		e.t.Fatal(err)
	}
	return maxStrikes, dead
}

// refusingPublisher refuses every Publish call to one topic while refusing is
// set, and records when each refused call started, per event id.
type refusingPublisher struct {
	message.Publisher
	topic    string
	refusing atomic.Bool
	mu       sync.Mutex
	refused  map[string][]time.Time
}

func (p *refusingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic == p.topic && p.refusing.Load() {
		now := time.Now()
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.refused == nil {
			p.refused = map[string][]time.Time{}
		}
		for _, m := range msgs {
			p.refused[m.UUID] = append(p.refused[m.UUID], now)
		}
		return errors.New("stream refused for this topic")
	}
	return p.Publisher.Publish(topic, msgs...)
}

// attempts returns, per event id, the start of each refused attempt: calls
// less than 20ms apart (a chunk, then the same event alone) are one attempt.
func (p *refusingPublisher) attempts() map[string][]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]time.Time{}
	for id, calls := range p.refused {
		sort.Slice(calls, func(i, j int) bool { return calls[i].Before(calls[j]) })
		for _, c := range calls {
			if n := len(out[id]); n == 0 || c.Sub(out[id][n-1]) >= 20*time.Millisecond {
				out[id] = append(out[id], c)
			}
		}
	}
	return out
}

// Issue 9, item 1: one event type refused for 3s while other events are
// written every 100ms. The refused events are retried on their own backoff
// schedule (each wait at least half the un-jittered backoff of that attempt),
// none dies although MaxAttempts is 12 and the other traffic publishes all
// along, and all are delivered once the type is accepted again.
func TestRefusedTypeKeepsItsBackoff(t *testing.T) {
	const (
		minB, maxB = 100 * time.Millisecond, 5 * time.Second
		slack      = 10 * time.Millisecond
	)
	for _, ordered := range []bool{false, true} {
		t.Run(modeName(ordered), func(t *testing.T) {
			e := newEnv(t)
			gc := newGoChannel()
			deposits := consume(t, gc, "account.deposited")
			withdrawals := consume(t, gc, withdrawnTopic)
			pub := &refusingPublisher{Publisher: gc, topic: withdrawnTopic}
			pub.refusing.Store(true)
			r, err := relay.New(e.db, pub, relay.Config{Ordered: ordered, PollInterval: 20 * time.Millisecond,
				MaxAttempts: 12, MinBackoff: minB, MaxBackoff: maxB, PublishTimeout: time.Second,
				LeaseDuration: 3 * time.Second, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			e.run(r)
			stopTrickle := e.trickle(100 * time.Millisecond)
			// Refused events keep coming for the first 2s (so some are claimed
			// alone, on their first attempt); the type is refused for 3s.
			start := time.Now()
			var refused []string
			for len(refused) < 6 {
				id, err := e.writeOne(withdrawn)
				if err != nil {
					t.Fatal(err)
				}
				refused = append(refused, id)
				time.Sleep(400 * time.Millisecond)
			}
			time.Sleep(3*time.Second - time.Since(start))
			pub.refusing.Store(false)
			if _, dead := e.strikes(); dead != 0 {
				t.Fatalf("%d events dead after 3s of refusal (RetryHorizon %v)", dead, relay.Config{MaxAttempts: 12, MinBackoff: minB, MaxBackoff: maxB}.RetryHorizon())
			}
			eventually(t, 15*time.Second, "the refused events, once accepted", func() bool { return withdrawals.distinct() == len(refused) })
			healthy := stopTrickle()
			eventually(t, 5*time.Second, "the other traffic", func() bool { return deposits.distinct() == len(healthy) })
			if _, dead := e.strikes(); dead != 0 {
				t.Fatalf("%d events dead", dead)
			}
			att := pub.attempts()
			if n := len(att[refused[0]]); n < 4 {
				t.Fatalf("the first refused event had %d refused attempts in 3s, want at least 4", n)
			}
			for _, id := range refused {
				times := att[id]
				for i := 1; i < len(times); i++ {
					got := times[i].Sub(times[i-1])
					want := backoffOf(minB, maxB, i) / 2
					if got < want-slack {
						t.Errorf("event %s: attempt %d came %v after attempt %d; its backoff allows no less than %v (attempts at %v)",
							id, i+1, got.Round(time.Millisecond), i, want, offsets(start, times))
					}
				}
			}
		})
	}
}

// backoffOf is the un-jittered wait after the n-th failure.
func backoffOf(minB, maxB time.Duration, n int) time.Duration {
	d := minB
	for i := 1; i < n && d < maxB; i++ {
		d *= 2
	}
	return min(d, maxB)
}

func offsets(start time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(start).Round(time.Millisecond)
	}
	return out
}

// brokerOutage passes Publish calls through until its budget of calls is
// spent or down is set, then refuses every call: a broker that died.
type brokerOutage struct {
	message.Publisher
	budget atomic.Int64
	down   atomic.Bool
}

func (b *brokerOutage) Publish(topic string, msgs ...*message.Message) error {
	if b.down.Load() || b.budget.Add(-1) < 0 {
		return errors.New("nats: connection closed")
	}
	return b.Publisher.Publish(topic, msgs...)
}

func (b *brokerOutage) back() {
	b.budget.Store(1 << 62)
	b.down.Store(false)
}

// Issue 9, item 2: a broker outage kills no event and adds no strike, whether
// it begins in the middle of a batch (the publisher accepts its first Publish
// call, then refuses everything; a backlog of 300 events makes that call one
// of many of its batch) or between batches, in both modes, with one relay or
// two at once. MaxAttempts 3 and backoffs of 10-50ms: the outage lasts until
// an event failed 6 times (about a second), and half a second more. When the
// broker is back, everything arrives.
func TestOutageKillsNoEventWhenever(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		for _, c := range []struct {
			name     string
			relays   int
			midBatch bool
		}{{"mid-batch", 1, true}, {"mid-batch/two-relays", 2, true}, {"between-batches/two-relays", 2, false}} {
			t.Run(modeName(ordered)+"/"+c.name, func(t *testing.T) {
				e := newEnv(t)
				gc := newGoChannel()
				got := consume(t, gc, "account.deposited")
				pub := &brokerOutage{Publisher: gc}
				pub.back()
				want := 0
				if c.midBatch {
					pub.budget.Store(1)
					want += len(idSet(e.write(100, 3)))
				}
				var relays []*relay.Relay
				for i := range c.relays {
					r, err := relay.New(e.db, pub, relay.Config{Ordered: ordered, PollInterval: 20 * time.Millisecond,
						MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
						PublishTimeout: time.Second, LeaseDuration: 3 * time.Second, InstanceID: fmt.Sprint("r", i),
						Logger: quietLogger()})
					if err != nil {
						t.Fatal(err)
					}
					relays = append(relays, r)
					e.run(r)
				}
				if !c.midBatch {
					want += len(idSet(e.write(50, 2)))
					eventually(t, 10*time.Second, "the first events", func() bool { return got.distinct() == want })
					pub.down.Store(true)
					want += len(idSet(e.write(100, 3)))
				}
				// Until some event failed twice MaxAttempts times (about 1s),
				// or died.
				var attempts int64
				for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					e.db.Raw(`SELECT coalesce(max(attempts), 0) FROM outbox_messages`).Scan(&attempts)
					if _, dead := e.strikes(); attempts >= 2*3 || dead > 0 {
						break
					}
				}
				time.Sleep(500 * time.Millisecond)
				strikes, dead := e.strikes()
				if dead != 0 || strikes != 0 {
					t.Fatalf("during the outage: %d dead, at most %d strikes; want none", dead, strikes)
				}
				if attempts < 2*3 {
					t.Fatalf("events failed at most %d times in 15s: the outage was not exercised", attempts)
				}
				if c.midBatch && got.distinct() == 0 {
					t.Fatal("nothing was published before the outage: it did not begin mid-batch")
				}
				pub.back()
				eventually(t, 10*time.Second, "every event after the broker came back", func() bool { return got.distinct() == want })
				eventually(t, 5*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
				if _, dead := e.strikes(); dead != 0 {
					t.Fatalf("%d dead", dead)
				}
			})
		}
	}
}

// After an outage, the events that failed during it do not wait out backoffs
// that grew while the broker was away: the first publish that succeeds makes
// their retries due.
func TestOutageRecoveryMakesRetriesDue(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(modeName(ordered), func(t *testing.T) {
			e := newEnv(t)
			gc := newGoChannel()
			got := consume(t, gc, "account.deposited")
			pub := &brokerOutage{Publisher: gc}
			pub.down.Store(true)
			r, err := relay.New(e.db, pub, relay.Config{Ordered: ordered, PollInterval: 20 * time.Millisecond,
				MinBackoff: time.Second, MaxBackoff: 20 * time.Second, PublishTimeout: time.Second,
				LeaseDuration: 3 * time.Second, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			e.run(r)
			early := idSet(e.write(10, 1))
			stop := e.trickle(100 * time.Millisecond)
			// Each early event fails at 0, then 0.5-1s later, then 1-2s later;
			// then it waits 2-4s: most are not due within 1s of 2.5s.
			time.Sleep(2500 * time.Millisecond)
			var waiting int64
			e.db.Raw(`SELECT count(*) FROM outbox_messages WHERE attempts >= 3 AND available_at > now() + interval '1 s'`).Scan(&waiting)
			if waiting == 0 {
				t.Fatal("no event waits a long backoff: the test would not tell")
			}
			pub.back()
			back := time.Now()
			eventually(t, 5*time.Second, "the early events", func() bool {
				got.mu.Lock()
				defer got.mu.Unlock()
				for id := range early {
					if got.ids[id] == 0 {
						return false
					}
				}
				return true
			})
			if d := time.Since(back); d > time.Second {
				t.Fatalf("the outage's failed events arrived %v after the broker came back: their retries were not made due", d)
			}
			healthy := stop()
			eventually(t, 10*time.Second, "everything", func() bool { return got.distinct() == len(early)+len(healthy) })
		})
	}
}

// logCapture is a slog handler that keeps every record.
type logCapture struct {
	mu      sync.Mutex
	records []slog.Record
}

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, r.Clone())
	return nil
}
func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCapture) WithGroup(string) slog.Handler      { return c }

// lines returns the attributes of each record with message msg.
func (c *logCapture) lines(msg string) []map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]string
	for _, r := range c.records {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// Issue 9, item 3: a topic the publisher always refuses, with no other
// traffic, cannot be told from an outage, so its events never die; the
// operator sees them: Stats and the collector count them as failing with the
// oldest pending age, and the log names the topic and the error, at a
// limited rate.
func TestPermanentRefusalIsVisible(t *testing.T) {
	e := newEnv(t)
	pub := &refusingPublisher{Publisher: newGoChannel(), topic: withdrawnTopic}
	pub.refusing.Store(true)
	logs := &logCapture{}
	r, err := relay.New(e.db, pub, relay.Config{PollInterval: 20 * time.Millisecond, MaxAttempts: 3,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := e.writeOne(withdrawn); err != nil {
			t.Fatal(err)
		}
	}
	e.run(r)
	time.Sleep(2 * time.Second)
	s, err := r.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Dead != 0 || s.Failing != 3 || s.Pending != 3 || s.OldestPending < 2*time.Second || s.Failed < 3*10 {
		t.Fatalf("stats after 2s of refusal: %+v; want 3 failing, none dead, an oldest age over 2s, 30+ failed attempts", s)
	}
	// The herald.outbox.failing gauge reads the same Stats: the examples
	// module's metrics test checks it through the Prometheus exporter.
	warns := logs.lines("publish failed; will retry")
	if len(warns) == 0 || len(warns) > 2 {
		t.Fatalf("%d warnings in 2s of %d failed attempts; want 1 or 2 (one per topic per 30s)", len(warns), s.Failed)
	}
	w := warns[0]
	if w["topic"] != withdrawnTopic || !strings.Contains(w["err"], "stream refused") || w["event_id"] == "" {
		t.Fatalf("warning %v does not name the topic, an event and the error", w)
	}
	if n := len(logs.lines("events are dead after their last attempt; see Relay.Dead")); n != 0 {
		t.Fatalf("%d dead lines", n)
	}
}
