package testkit

// Fake publishers the tests of every package share, and what a subscriber
// received.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/testkit/tb"
)

// NewGoChannel returns an in-process pub/sub that delivers in publish order
// (without BlockPublishUntilSubscriberAck it hands each message to a
// goroutine) to subscribers that keep up (Consume).
func NewGoChannel() *gochannel.GoChannel {
	return gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 100000, BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
}

// PublisherFunc is a message.Publisher made of a function.
type PublisherFunc func(topic string, msgs ...*message.Message) error

// Publish calls f.
func (f PublisherFunc) Publish(topic string, msgs ...*message.Message) error {
	return f(topic, msgs...)
}

// Close does nothing.
func (PublisherFunc) Close() error { return nil }

// FailMode is how Failing fails a Publish call.
type FailMode string

const (
	// FailError returns an error ("broker refused").
	FailError FailMode = "error"
	// FailPanic panics ("publisher bug").
	FailPanic FailMode = "panic"
	// FailHang never returns (until the test ends).
	FailHang FailMode = "hang"
)

// Failing passes Publish calls through to Publisher, but fails, in its Mode,
// every call that carries a message Match picks.
type Failing struct {
	message.Publisher
	Match func(*message.Message) bool
	Mode  FailMode
	done  chan struct{}
}

// NewFailing returns a Failing over pub; a hanging call returns when the test
// ends.
func NewFailing(t tb.TB, pub message.Publisher, mode FailMode, match func(*message.Message) bool) *Failing {
	f := &Failing{Publisher: pub, Match: match, Mode: mode, done: make(chan struct{})}
	t.Cleanup(func() { close(f.done) })
	return f
}

// Publish fails the call if Match picks one of msgs.
func (p *Failing) Publish(topic string, msgs ...*message.Message) error {
	if slices.ContainsFunc(msgs, p.Match) {
		switch p.Mode {
		case FailPanic:
			panic("publisher bug")
		case FailHang:
			<-p.done
			return errors.New("hung until the test ended")
		default:
			return errors.New("broker refused")
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// Refusing refuses every Publish call to Topic while Refusing is set, and
// records when each refused call started, per message UUID, and whether it
// carried the message alone.
type Refusing struct {
	message.Publisher
	Topic    string
	Refusing atomic.Bool
	mu       sync.Mutex
	refused  map[string][]refusal
}

// refusal is a refused call of one message: when, and whether alone.
type refusal struct {
	at    time.Time
	alone bool
}

// Publish refuses calls to Topic while Refusing is set.
func (p *Refusing) Publish(topic string, msgs ...*message.Message) error {
	if topic == p.Topic && p.Refusing.Load() {
		now := time.Now()
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.refused == nil {
			p.refused = map[string][]refusal{}
		}
		for _, m := range msgs {
			p.refused[m.UUID] = append(p.refused[m.UUID], refusal{now, len(msgs) == 1})
		}
		return errors.New("stream refused for this topic")
	}
	return p.Publisher.Publish(topic, msgs...)
}

// Attempts returns, per message UUID, the start of each refused attempt. An
// attempt is one call, or a chunk then the same message alone (the relay
// tries a refused chunk's messages one by one): a call alone less than
// within after a chunk call is that chunk's attempt. Any other call, however
// soon, is an attempt of its own.
func (p *Refusing) Attempts(within time.Duration) map[string][]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]time.Time{}
	for id, calls := range p.refused {
		calls = slices.Clone(calls)
		slices.SortFunc(calls, func(a, b refusal) int { return a.at.Compare(b.at) })
		for i, c := range calls {
			if i > 0 && c.alone && !calls[i-1].alone && c.at.Sub(calls[i-1].at) < within {
				continue
			}
			out[id] = append(out[id], c.at)
		}
	}
	return out
}

// Outage passes Publish calls through until its budget of calls is spent or
// it is down, then refuses every call: a broker that died. NewOutage returns
// it up, with no limit.
type Outage struct {
	message.Publisher
	budget atomic.Int64
	down   atomic.Bool
}

// NewOutage returns an Outage over pub, up.
func NewOutage(pub message.Publisher) *Outage {
	o := &Outage{Publisher: pub}
	o.Up()
	return o
}

// Publish passes the call through unless the broker is down.
func (o *Outage) Publish(topic string, msgs ...*message.Message) error {
	if o.down.Load() || o.budget.Add(-1) < 0 {
		return errors.New("nats: connection closed")
	}
	return o.Publisher.Publish(topic, msgs...)
}

// Budget lets n more calls through, then the broker is down.
func (o *Outage) Budget(n int64) { o.budget.Store(n) }

// Down refuses every call from now on.
func (o *Outage) Down() { o.down.Store(true) }

// Up lets every call through again.
func (o *Outage) Up() {
	o.budget.Store(1 << 62)
	o.down.Store(false)
}

// Blocking blocks every Publish call until Release is called or the test
// ends, then fails it: a broker that stopped answering. Entered is closed when
// the first call arrives; Calls counts them.
type Blocking struct {
	entered, release chan struct{}
	enterOnce, once  sync.Once
	calls            atomic.Int64
}

// NewBlocking returns a Blocking publisher, released when the test ends.
func NewBlocking(t tb.TB) *Blocking {
	b := &Blocking{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(b.Release)
	return b
}

// Publish blocks until Release, then fails.
func (b *Blocking) Publish(string, ...*message.Message) error {
	b.calls.Add(1)
	b.enterOnce.Do(func() { close(b.entered) })
	<-b.release
	return errors.New("blocked publisher released")
}

// Close releases the blocked calls.
func (b *Blocking) Close() error {
	b.Release()
	return nil
}

// Entered is closed when the first Publish call arrives.
func (b *Blocking) Entered() <-chan struct{} { return b.entered }

// Calls is how many Publish calls arrived.
func (b *Blocking) Calls() int64 { return b.calls.Load() }

// Release makes every blocked and later call return (failed).
func (b *Blocking) Release() { b.once.Do(func() { close(b.release) }) }

// Counting passes Publish calls through and counts, per message UUID, the
// messages it passed on that Publisher accepted: which relay published what.
type Counting struct {
	message.Publisher
	mu  sync.Mutex
	ids map[string]int
}

// Publish passes the call through and counts its messages if it succeeded.
func (c *Counting) Publish(topic string, msgs ...*message.Message) error {
	if err := c.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = map[string]int{}
	}
	for _, m := range msgs {
		c.ids[m.UUID]++
	}
	return nil
}

// Published returns how many times each UUID was published through c.
func (c *Counting) Published() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.ids))
	for k, v := range c.ids {
		out[k] = v
	}
	return out
}

// MustNotPublish fails the test if it is ever called: for a router that must
// not publish what a handler returns.
type MustNotPublish struct{ T tb.TB }

// Publish fails the test.
func (p MustNotPublish) Publish(topic string, _ ...*message.Message) error {
	p.T.Errorf("published to %s: nothing may be published here", topic)
	return nil
}

// Close does nothing.
func (MustNotPublish) Close() error { return nil }

// Received is what a subscriber got, in order, with the time each UUID first
// arrived.
type Received struct {
	mu    sync.Mutex
	msgs  []*message.Message
	ids   map[string]int
	first map[string]time.Time
}

func (r *Received) add(m *message.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids, r.first = map[string]int{}, map[string]time.Time{}
	}
	r.msgs = append(r.msgs, m)
	if r.ids[m.UUID] == 0 {
		r.first[m.UUID] = time.Now()
	}
	r.ids[m.UUID]++
}

// Distinct is how many different UUIDs arrived.
func (r *Received) Distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// Total is how many messages arrived, duplicates included.
func (r *Received) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// Count is how many times id arrived.
func (r *Received) Count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids[id]
}

// FirstAt is when id first arrived (zero if it did not).
func (r *Received) FirstAt(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first[id]
}

// HasAll reports whether every id of ids arrived.
func (r *Received) HasAll(ids map[string]bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range ids {
		if r.ids[id] == 0 {
			return false
		}
	}
	return true
}

// Snapshot returns the messages that arrived, in order.
func (r *Received) Snapshot() []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// Consume subscribes to topic until the test ends and records every message,
// acking it.
func Consume(t tb.TB, sub message.Subscriber, topic string) *Received {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatalf("testkit: subscribe %s: %v", topic, err)
	}
	got := &Received{}
	go func() {
		for m := range ch {
			got.add(m)
			m.Ack()
		}
	}()
	return got
}

// IDSet flattens event ids by aggregate into a set of their strings.
func IDSet(m map[uuid.UUID][]uuid.UUID) map[string]bool {
	out := map[string]bool{}
	for _, ids := range m {
		for _, id := range ids {
			out[id.String()] = true
		}
	}
	return out
}

// OrderViolations counts the events, of ids (each aggregate's in commit
// order), whose first delivery in msgs came before the first delivery of an
// earlier event of their aggregate. Redeliveries (duplicates) may come
// anywhere; events that did not arrive are skipped.
func OrderViolations(ids map[uuid.UUID][]uuid.UUID, msgs []*message.Message) int {
	first := map[string]int{}
	for i, m := range msgs {
		if _, ok := first[m.UUID]; !ok {
			first[m.UUID] = i
		}
	}
	bad := 0
	for _, evs := range ids {
		last := -1
		for _, id := range evs {
			pos, ok := first[id.String()]
			if !ok {
				continue
			}
			if pos < last {
				bad++
			}
			last = pos
		}
	}
	return bad
}

// CheckOrder fails the test if the first deliveries of an aggregate's events
// in got came out of commit order (see OrderViolations).
func CheckOrder(t tb.TB, ids map[uuid.UUID][]uuid.UUID, got *Received) {
	t.Helper()
	if n := OrderViolations(ids, got.Snapshot()); n > 0 {
		t.Fatalf("%d order violations", n)
	}
}

// RunRouter runs r until the test ends, and returns once it is running.
func RunRouter(t tb.TB, r *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	<-r.Running()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// Run runs run (a Relay's Run) until the test ends or stop is called, and
// fails the test if run returns an error or does not return within 30s of
// its cancel. returned tells whether run returned before it was cancelled,
// which a relay never should.
func Run(t tb.TB, run func(context.Context) error) (returned *atomic.Bool, stop func()) {
	returned = &atomic.Bool{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := run(ctx); err != nil {
			t.Errorf("Run returned %v", err)
		}
		returned.Store(ctx.Err() == nil)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("Run did not return within 30s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return returned, stop
}
