package walrelay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/walrelay"
)

// step is an event as a publish call carried it.
type step struct {
	agg string
	n   int
	typ string
}

func (s step) String() string { return fmt.Sprintf("%s:%d", s.agg, s.n) }

func stepOf(t *testing.T, m *message.Message) step {
	t.Helper()
	env, err := events.ParseEnvelope(m.UUID, m.Metadata, m.Payload)
	testkit.Must(t, err)
	var s Step
	testkit.Must(t, json.Unmarshal(env.Payload, &s))
	return step{agg: s.Agg, n: s.N, typ: env.Type}
}

// recorder is a publisher that records each call's events and decides each
// message's result (decide, nil: published); the published go on to pub. A
// Publish call fails whole, publishing nothing, when a message of it fails.
// While gate is open (not closed), its first call waits.
type recorder struct {
	t      *testing.T
	pub    message.Publisher
	decide func(call int, s step) error
	gate   chan struct{}
	in     chan struct{} // closed when the first call began

	mu                sync.Mutex
	calls             [][]step
	plain, batches    int
	failedCalls       atomic.Int64
	once              sync.Once
	publishedMessages atomic.Int64
}

func newRecorder(t *testing.T, pub message.Publisher, gated bool) *recorder {
	r := &recorder{t: t, pub: pub, in: make(chan struct{})}
	if gated {
		r.gate = make(chan struct{})
	} else {
		close(r.in)
	}
	return r
}

// open lets the first call go on once it began and the relay had the time
// to read what was written meanwhile.
func (r *recorder) open() {
	<-r.in
	time.Sleep(time.Second)
	close(r.gate)
}

// results records a call and returns its messages' results.
func (r *recorder) results(batch bool, msgs []*message.Message) []error {
	if r.gate != nil {
		r.once.Do(func() { close(r.in); <-r.gate })
	}
	r.mu.Lock()
	call := len(r.calls)
	var ss []step
	for _, m := range msgs {
		ss = append(ss, stepOf(r.t, m))
	}
	r.calls = append(r.calls, ss)
	if batch {
		r.batches++
	} else {
		r.plain++
	}
	r.mu.Unlock()
	errs := make([]error, len(msgs))
	failed := false
	for i, s := range ss {
		if r.decide != nil {
			errs[i] = r.decide(call, s)
		}
		failed = failed || errs[i] != nil
	}
	if failed {
		r.failedCalls.Add(1)
	}
	return errs
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	for _, err := range r.results(false, msgs) {
		if err != nil {
			return err
		}
	}
	r.publishedMessages.Add(int64(len(msgs)))
	return r.pub.Publish(topic, msgs...)
}

func (r *recorder) Close() error { return nil }

func (r *recorder) recorded() (calls [][]step, plain, batches int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls), r.plain, r.batches
}

// batchRecorder is a recorder that is a relay.BatchPublisher: the
// messages that succeed are published, whatever the others' results.
type batchRecorder struct{ *recorder }

func (b batchRecorder) PublishBatch(_ context.Context, topic string, msgs ...*message.Message) []error {
	errs := b.results(true, msgs)
	for i, m := range msgs {
		if errs[i] == nil {
			if err := b.pub.Publish(topic, m); err != nil {
				errs[i] = err
			} else {
				b.publishedMessages.Add(1)
			}
		}
	}
	return errs
}

var _ relay.BatchPublisher = batchRecorder{}

// publisher returns rec as a plain publisher or as a BatchPublisher.
func publisher(rec *recorder, batch bool) message.Publisher {
	if batch {
		return batchRecorder{rec}
	}
	return rec
}

var kinds = map[string]bool{"Publish": false, "PublishBatch": true}

// saveMany writes events ns of agg in one transaction.
func saveMany(t *testing.T, db *gorm.DB, agg string, ns ...int) {
	t.Helper()
	it := &item{ID: uuid.New(), Agg: agg}
	for _, n := range ns {
		it.Record(Step{Agg: agg, N: n})
	}
	testkit.Must(t, db.Create(it).Error)
}

// Events already read when a call ends go together in the next, in commit
// order, with PublishBatch when the publisher has it, at most BatchSize a
// call; the slot confirms them all.
func TestBatchSeveralPerCall(t *testing.T) {
	t.Parallel()
	for name, batch := range kinds {
		for _, size := range []int{0, 4} {
			t.Run(fmt.Sprintf("%s/BatchSize%d", name, size), func(t *testing.T) {
				db, rs := setupAggs(t)
				gc := ordered()
				c := collect(t, gc)
				rec := newRecorder(t, gc, true)
				start(t, rs.with(t, publisher(rec, batch), walrelay.Config{BatchSize: size}))
				save(t, db, "a0", 0, false) // the first call, held at the gate
				<-rec.in
				var want []string
				want = append(want, "a0:0")
				for n := range 5 {
					save(t, db, "a1", n, false)
					want = append(want, fmt.Sprintf("a1:%d", n))
				}
				saveMany(t, db, "a2", 0, 1, 2, 3, 4)
				for n := range 5 {
					want = append(want, fmt.Sprintf("a2:%d", n))
				}
				for n := range 5 {
					save(t, db, "a3", n, false)
					want = append(want, fmt.Sprintf("a3:%d", n))
				}
				rec.open()
				waitFor(t, "the events", func() bool { return len(c.deliveries()) >= len(want) })
				var got []string
				for _, d := range c.deliveries() {
					got = append(got, fmt.Sprintf("%s:%d", d.agg, d.n))
				}
				if !slices.Equal(got, want) {
					t.Fatalf("published %v, want %v", got, want)
				}
				calls, plain, batches := rec.recorded()
				largest := 0
				for _, c := range calls {
					largest = max(largest, len(c))
				}
				t.Logf("calls: %v", calls)
				switch {
				case size == 0 && largest < 2:
					t.Fatalf("one event per call: %v", calls)
				case size > 0 && largest != size:
					t.Fatalf("largest call %d events, want BatchSize %d: %v", largest, size, calls)
				case batch && plain > 0, !batch && batches > 0:
					t.Fatalf("%d Publish and %d PublishBatch calls", plain, batches)
				}
				waitConfirmed(t, db, rs.slot)
			})
		}
	}
}

// An event refused in the middle of a call, both modes, both kinds of
// publisher, refused by the broker (relay.ErrRejected) or with a plain error
// (confirmed by the next success): it is parked, and in ordered mode its
// aggregate's later events behind it; every other event is published once,
// each aggregate's in order; the slot confirms everything.
func TestBatchRefusedMidBatch(t *testing.T) {
	t.Parallel()
	for name, batch := range kinds {
		for _, ordered := range []bool{false, true} {
			for _, rejected := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/ordered=%v/rejected=%v", name, ordered, rejected), func(t *testing.T) {
					testRefusedMidBatch(t, batch, ordered, rejected)
				})
			}
		}
	}
}

func testRefusedMidBatch(t *testing.T, batch, ord, rejected bool) {
	db, rs := setupAggs(t)
	gc := ordered()
	c := collect(t, gc)
	rec := newRecorder(t, gc, true)
	rec.decide = func(_ int, s step) error {
		switch {
		case s.typ != "poison":
			return nil
		case rejected:
			return fmt.Errorf("poison refused: %w", relay.ErrRejected)
		default:
			return errors.New("no such topic")
		}
	}
	start(t, rs.with(t, publisher(rec, batch), walrelay.Config{Ordered: ord}))
	save(t, db, "a0", 0, false)
	<-rec.in
	const per = 6
	aggs := []string{"a1", "a2", "a3"}
	for n := range per {
		for _, a := range aggs {
			save(t, db, a, n, a == "a2" && n == 2)
		}
	}
	rec.open()
	// Live traffic after: a plain failure is confirmed by a later success.
	live, stopLive := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stopLive(); wg.Wait() })
	wg.Go(func() {
		for n := 0; live.Err() == nil; n++ {
			save(t, db, "live", n, false)
			time.Sleep(10 * time.Millisecond)
		}
	})
	parked := 1
	if ord {
		parked += per - 3
	}
	waitFor(t, "the parked", func() bool { return count(t, db, `SELECT count(*) FROM outbox_messages`) == parked })
	wantErr := "%refused%"
	if !rejected {
		wantErr = "no such topic"
	}
	if n := count(t, db, `SELECT count(*) FROM outbox_messages WHERE type = 'poison' AND attempts = 1 AND strikes = 1
AND last_error LIKE ?`, wantErr); n != 1 {
		t.Fatalf("%d refused events parked with their attempt and error, want 1", n)
	}
	want := map[string][]int{"a0": {0}, "a1": seq(0, per), "a3": seq(0, per), "a2": seq(0, per, 2)}
	if ord {
		want["a2"] = seq(0, 2)
	}
	waitFor(t, "the published", func() bool {
		got := byAgg(c.deliveries())
		for a, ns := range want {
			if len(got[a]) < len(ns) {
				return false
			}
		}
		return true
	})
	stopLive()
	wg.Wait()
	got := byAgg(c.deliveries())
	for a, ns := range got {
		if !ord { // across a failure, any order (see the package doc)
			slices.Sort(ns)
		} else if !slices.IsSorted(ns) {
			t.Errorf("published of %s out of order: %v", a, ns)
		}
	}
	for a, ns := range want {
		if !slices.Equal(got[a], ns) {
			t.Errorf("published of %s: %v, want %v", a, got[a], ns)
		}
	}
	calls, _, _ := rec.recorded()
	several := false
	for _, c := range calls {
		several = several || len(c) > 1
		if ord {
			seen := map[string]bool{}
			for _, s := range c {
				if seen[s.agg] {
					t.Errorf("ordered mode: a call with two events of %s: %v", s.agg, c)
				}
				seen[s.agg] = true
			}
		}
	}
	if !several {
		t.Errorf("no call had several events: %v", calls)
	}
	waitConfirmed(t, db, rs.slot)
}

// A relay stopped while its publisher fails after a batch was published
// confirmed the transactions published and only them: the next relay
// publishes exactly the rest, in order. Publish: the first calls of 6 pass,
// then every call fails; PublishBatch: the second call takes its first 5
// and fails the rest (two or more failures: an outage, nothing parked),
// then every call fails.
func TestBatchRestartRedelivers(t *testing.T) {
	t.Parallel()
	for name, batch := range kinds {
		t.Run(name, func(t *testing.T) {
			db, rs := setupAggs(t)
			gc := ordered()
			c := collect(t, gc)
			rec := newRecorder(t, gc, true)
			var inCall atomic.Int64
			rec.decide = func(call int, s step) error {
				if call == 0 || (!batch && call == 1) {
					return nil
				}
				if batch && call == 1 && inCall.Add(1) <= 5 {
					return nil
				}
				return errors.New("broker down")
			}
			size := 0
			if !batch {
				size = 6
			}
			stop := start(t, rs.with(t, publisher(rec, batch), walrelay.Config{BatchSize: size}))
			save(t, db, "a0", 0, false)
			<-rec.in
			stream := []string{"a0:0"}
			for n := range 10 {
				save(t, db, "a1", n, false)
				stream = append(stream, fmt.Sprintf("a1:%d", n))
			}
			saveMany(t, db, "a2", 0, 1, 2)
			stream = append(stream, "a2:0", "a2:1", "a2:2")
			rec.open()
			waitFor(t, "failing calls", func() bool { return rec.failedCalls.Load() >= 4 })
			stop()
			published := int(rec.publishedMessages.Load())
			wantFirst := map[bool]int{false: 7, true: 6}[batch]
			if published != wantFirst {
				calls, _, _ := rec.recorded()
				t.Fatalf("the first relay published %d events, want %d: %v", published, wantFirst, calls)
			}
			if n := count(t, db, `SELECT count(*) FROM outbox_messages`); n != 0 {
				t.Fatalf("the outage parked %d events", n)
			}
			var got []string
			for _, d := range c.deliveries() {
				got = append(got, fmt.Sprintf("%s:%d", d.agg, d.n))
			}
			if !slices.Equal(got, stream[:published]) {
				t.Fatalf("first relay published %v, want %v", got, stream[:published])
			}
			// The next relay: every publish of it recorded, duplicates too.
			again := newRecorder(t, gc, false)
			start(t, rs.with(t, publisher(again, batch), walrelay.Config{}))
			want := stream[published:]
			var second []string
			waitFor(t, "the rest", func() bool {
				calls, _, _ := again.recorded()
				second = nil
				for _, c := range calls {
					for _, s := range c {
						second = append(second, s.String())
					}
				}
				return len(second) >= len(want)
			})
			time.Sleep(300 * time.Millisecond)
			calls, _, _ := again.recorded()
			second = nil
			for _, c := range calls {
				for _, s := range c {
					second = append(second, s.String())
				}
			}
			if !slices.Equal(second, want) {
				t.Fatalf("the next relay published %v, want %v", second, want)
			}
			waitConfirmed(t, db, rs.slot)
		})
	}
}

// meter is a MeterProvider that keeps the sums of its counters and the
// counts of its histograms' records, by name, and each's slot attribute.
type meter struct {
	noop.Meter
	mu     sync.Mutex
	sums   map[string]int64
	counts map[string]int
	slots  map[string]string
}

func newMeter() *meter {
	return &meter{sums: map[string]int64{}, counts: map[string]int{}, slots: map[string]string{}}
}

// provider is a MeterProvider whose meter is m.
type provider struct {
	noop.MeterProvider
	m *meter
}

func (p provider) Meter(string, ...metric.MeterOption) metric.Meter { return p.m }

func (m *meter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return &counter{m: m, name: name}, nil
}

func (m *meter) Float64Histogram(name string, _ ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return &histogram{m: m, name: name}, nil
}

func (m *meter) note(name string, attrs attribute.Set, sum int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sums[name] += sum
	m.counts[name]++
	v, _ := attrs.Value("slot")
	m.slots[name] = v.AsString()
}

func (m *meter) get(name string) (int64, int, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sums[name], m.counts[name], m.slots[name]
}

type counter struct {
	noop.Int64Counter
	m    *meter
	name string
}

func (c *counter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	c.m.note(c.name, metric.NewAddConfig(opts).Attributes(), n)
}

type histogram struct {
	noop.Float64Histogram
	m    *meter
	name string
}

func (h *histogram) Record(_ context.Context, _ float64, opts ...metric.RecordOption) {
	h.m.note(h.name, metric.NewRecordConfig(opts).Attributes(), 0)
}

// The publish counters: events published, failed attempts, events parked,
// and a duration per call, with the slot; a successful call counts for
// SucceededSince.
func TestPublishMetrics(t *testing.T) {
	t.Parallel()
	for name, batch := range kinds {
		t.Run(name, func(t *testing.T) {
			db, rs := setupAggs(t)
			gc := ordered()
			c := collect(t, gc)
			rec := newRecorder(t, gc, false)
			rec.decide = func(_ int, s step) error {
				if s.typ == "poison" {
					return fmt.Errorf("poison refused: %w", relay.ErrRejected)
				}
				return nil
			}
			m := newMeter()
			r := rs.with(t, publisher(rec, batch), walrelay.Config{MeterProvider: provider{m: m}})
			began := time.Now()
			start(t, r)
			for n := range 6 {
				save(t, db, "a1", n, n == 3)
			}
			waitFor(t, "the events", func() bool {
				return len(c.deliveries()) == 5 && count(t, db, `SELECT count(*) FROM outbox_messages`) == 1
			})
			// The counters are added after what the test waited for (the
			// parked row is written before herald.wal.parked counts it, a
			// call timed after it returned): wait for them too.
			var (
				pub, failed, parked int64
				calls, timed        int
				slot                string
			)
			counted := func() bool {
				pub, _, slot = m.get("herald.wal.published")
				failed, _, _ = m.get("herald.wal.failed")
				parked, _, _ = m.get("herald.wal.parked")
				_, calls, _ = m.get("herald.wal.publish.duration")
				recorded, _, _ := rec.recorded()
				timed = len(recorded)
				return pub == 5 && failed == 1 && parked == 1 && calls == timed && slot == rs.slot
			}
			for deadline := time.Now().Add(10 * time.Second); !counted() && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if !counted() {
				t.Fatalf("published %d, failed %d, parked %d, %d calls timed of %d, slot %q; want 5, 1, 1, all, %q",
					pub, failed, parked, calls, timed, slot, rs.slot)
			}
			if !r.SucceededSince(began) || r.SucceededSince(time.Now()) {
				t.Fatal("SucceededSince does not follow the publishes")
			}
		})
	}
}
