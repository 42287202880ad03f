package walrelay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/walrelay"
)

// item is a model whose saves record one event of its aggregate, Agg.
type item struct {
	ID  uuid.UUID `gorm:"type:uuid;primaryKey"`
	Agg string
	N   int
	aggregate.Root
}

func (i *item) AggregateType() string { return "Item" }
func (i *item) AggregateID() string   { return i.Agg }

// Step is an event the broker takes; Poison one it refuses.
type Step struct {
	Agg string
	N   int
}

func (Step) EventType() string { return "step" }

type Poison Step

func (Poison) EventType() string { return "poison" }

const steps = "steps"

// setupAggs opens a database with the plugin in StorageWAL (every event to
// steps) and the items table, and makes the slot.
func setupAggs(t *testing.T) (*gorm.DB, *relays) {
	t.Helper()
	t.Parallel()
	db, dsn := logicaltest.Open(t, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{
		Storage: outboxhook.StorageWAL,
		Topic:   func(*events.Envelope) string { return steps },
	})))
	testkit.Must(t, db.AutoMigrate(&item{}))
	rs := &relays{dsn: dsn, slot: logicaltest.SlotName()}
	testkit.Must(t, rs.ordered(t, ordered()).Setup(context.Background()))
	return db, rs
}

// ordered returns a walrelay in ordered mode on rs's slot.
func (rs *relays) ordered(t *testing.T, pub message.Publisher) *walrelay.Relay {
	t.Helper()
	return rs.with(t, pub, walrelay.Config{Ordered: true})
}

// with returns a walrelay of cfg on rs's slot, with short intervals.
func (rs *relays) with(t *testing.T, pub message.Publisher, cfg walrelay.Config) *walrelay.Relay {
	t.Helper()
	cfg.Slot, cfg.Logger = rs.slot, testkit.Quiet()
	cfg.RetryInterval, cfg.StatusInterval = 20*time.Millisecond, 50*time.Millisecond
	r, err := walrelay.New(rs.dsn, pub, cfg)
	testkit.Must(t, err)
	return r
}

// save writes event n of agg, in a transaction of its own: a Poison if
// poison, else a Step.
func save(t *testing.T, db *gorm.DB, agg string, n int, poison bool) {
	t.Helper()
	it := &item{ID: uuid.New(), Agg: agg, N: n}
	if poison {
		it.Record(Poison{Agg: agg, N: n})
	} else {
		it.Record(Step{Agg: agg, N: n})
	}
	if err := db.Create(it).Error; err != nil {
		t.Errorf("save %s %d: %v", agg, n, err)
	}
}

// broker refuses the messages of type refuse (relay.ErrRejected) and, while
// down, fails every call; else it publishes to pub.
type broker struct {
	pub    message.Publisher
	refuse string
	down   atomic.Bool
	failed atomic.Int64 // calls failed while down
}

func (b *broker) Publish(topic string, msgs ...*message.Message) error {
	if b.down.Load() {
		b.failed.Add(1)
		return errors.New("broker down")
	}
	for _, m := range msgs {
		if m.Metadata.Get(events.MetaType) == b.refuse {
			return fmt.Errorf("%s refused: %w", b.refuse, relay.ErrRejected)
		}
	}
	return b.pub.Publish(topic, msgs...)
}

func (b *broker) Close() error { return nil }

// delivery is a message as the subscriber got it.
type delivery struct {
	agg  string
	n    int
	at   time.Time
	typ  string
	uuid string
}

// collector acks and keeps what is published to steps, the first delivery
// of each message.
type collector struct {
	mu   sync.Mutex
	seen map[string]bool
	got  []delivery
}

func collect(t *testing.T, pub message.Subscriber) *collector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := pub.Subscribe(ctx, steps)
	testkit.Must(t, err)
	c := &collector{seen: map[string]bool{}}
	go func() {
		for m := range ch {
			var s Step
			env, err := events.ParseEnvelope(m.UUID, m.Metadata, m.Payload)
			if err == nil {
				err = json.Unmarshal(env.Payload, &s)
			}
			if err != nil {
				t.Errorf("message %s: %v", m.UUID, err)
			}
			c.mu.Lock()
			if !c.seen[m.UUID] {
				c.seen[m.UUID] = true
				c.got = append(c.got, delivery{agg: s.Agg, n: s.N, at: time.Now(), typ: env.Type, uuid: m.UUID})
			}
			c.mu.Unlock()
			m.Ack()
		}
	}()
	return c
}

func (c *collector) deliveries() []delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// byAgg returns the steps delivered of each aggregate, in delivery order.
func byAgg(ds []delivery) map[string][]int {
	out := map[string][]int{}
	for _, d := range ds {
		out[d.agg] = append(out[d.agg], d.n)
	}
	return out
}

// waitFor waits until cond holds, at most 60s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func count(t *testing.T, db *gorm.DB, q string, args ...any) int {
	t.Helper()
	var n int
	testkit.Must(t, db.Raw(q, args...).Scan(&n).Error)
	return n
}

// writeAggs writes, from writers goroutines at once, events 0..per-1 of
// aggs aggregates a0, a1, ... (each writer its share, interleaved), event 3
// of the aggregates in poisoned a Poison.
func writeAggs(t *testing.T, db *gorm.DB, writers, aggs, from, to int, poisoned map[string]bool) {
	t.Helper()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for n := from; n < to; n++ {
				for a := w; a < aggs; a += writers {
					agg := fmt.Sprintf("a%d", a)
					save(t, db, agg, n, poisoned[agg] && n == 3)
				}
			}
		})
	}
	wg.Wait()
}

func seq(from, to int, skip ...int) []int {
	var out []int
	for i := from; i < to; i++ {
		if !slices.Contains(skip, i) {
			out = append(out, i)
		}
	}
	return out
}

// An event type the broker refuses, under live traffic, in ordered mode:
// each refused event is parked as a row with its attempt and error, and the
// later events of its aggregate behind it, while every other aggregate's
// events are published from the WAL; a table relay on the same table
// retries the refused ones until they are dead, then publishes the parked
// ones behind them, in order; then the aggregate's events flow from the WAL
// again. No later event of a refused one's aggregate is published before it
// died.
func TestParkRefusedOrdered(t *testing.T) {
	db, rs := setupAggs(t)
	gc := ordered()
	c := collect(t, gc)
	b := &broker{pub: gc, refuse: "poison"}
	start(t, rs.ordered(t, b))
	const writers, aggs, per = 4, 20, 10
	poisoned := map[string]bool{"a0": true, "a5": true, "a10": true, "a15": true}
	writeAggs(t, db, writers, aggs, 0, per, poisoned)

	// Before any table relay runs: the others all published, the refused
	// and those behind them rows.
	want := 0
	for a := range aggs {
		if poisoned[fmt.Sprintf("a%d", a)] {
			want += 3
		} else {
			want += per
		}
	}
	waitFor(t, "the WAL relay's publishes", func() bool { return len(c.deliveries()) >= want })
	waitFor(t, "the parked rows", func() bool {
		return count(t, db, `SELECT count(*) FROM outbox_messages`) == len(poisoned)*(per-3)
	})
	if n := count(t, db, `SELECT count(*) FROM outbox_messages WHERE type = 'poison' AND attempts = 1 AND strikes = 1
AND last_error LIKE '%refused%' AND dead_at IS NULL`); n != len(poisoned) {
		t.Fatalf("%d refused events parked with their attempt and error, want %d", n, len(poisoned))
	}
	if n := count(t, db, `SELECT count(*) FROM outbox_messages o WHERE type = 'step' AND attempts = 0 AND seq > (
  SELECT p.seq FROM outbox_messages p WHERE p.type = 'poison' AND p.aggregate_id = o.aggregate_id)`); n != len(poisoned)*(per-4) {
		t.Fatalf("%d later events parked behind the refused ones, want %d", n, len(poisoned)*(per-4))
	}
	for agg, ns := range byAgg(c.deliveries()) {
		if wantNs := seq(0, map[bool]int{false: per, true: 3}[poisoned[agg]]); !slices.Equal(ns, wantNs) {
			t.Fatalf("published of %s: %v, want %v", agg, ns, wantNs)
		}
	}

	// The table relay kills the refused ones and publishes the parked.
	tr, err := relay.New(db, b, relay.Config{Ordered: true, MaxAttempts: 3, MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retention: time.Hour, Logger: testkit.Quiet()})
	testkit.Must(t, err)
	testkit.Run(t, tr.Run)
	want += len(poisoned) * (per - 4)
	waitFor(t, "the table relay", func() bool { // (it marks an event after the broker took it)
		return len(c.deliveries()) >= want &&
			count(t, db, `SELECT count(*) FROM outbox_messages WHERE type = 'poison' AND dead_at IS NOT NULL`) == len(poisoned) &&
			count(t, db, `SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL`) == 0
	})

	// The poisoned aggregates' events flow from the WAL again: no new rows.
	rows := count(t, db, `SELECT count(*) FROM outbox_messages`)
	writeAggs(t, db, writers, aggs, per, per+2, nil)
	want += aggs * 2
	waitFor(t, "the events after", func() bool { return len(c.deliveries()) >= want })
	if n := count(t, db, `SELECT count(*) FROM outbox_messages`); n != rows {
		t.Errorf("%d rows after the refused died, want %d: later events were parked", n, rows)
	}

	ds := c.deliveries()
	if len(ds) != want {
		t.Errorf("%d events published, want %d", len(ds), want)
	}
	deaths := map[string]time.Time{}
	var dead []struct {
		AggregateID string
		DeadAt      time.Time
	}
	testkit.Must(t, db.Raw(`SELECT aggregate_id, dead_at FROM outbox_messages WHERE type = 'poison'`).Scan(&dead).Error)
	for _, d := range dead {
		deaths[d.AggregateID] = d.DeadAt
	}
	for _, d := range ds {
		if d.typ != "step" {
			t.Fatalf("published a %s", d.typ)
		}
		if died, ok := deaths[d.agg]; ok && d.n > 3 && !d.at.After(died) {
			t.Errorf("%s %d published at %v, before its refused event died at %v", d.agg, d.n, d.at, died)
		}
	}
	for agg, ns := range byAgg(ds) {
		wantNs := seq(0, per+2)
		if poisoned[agg] {
			wantNs = seq(0, per+2, 3)
		}
		if !slices.Equal(ns, wantNs) {
			t.Errorf("published of %s: %v, want %v", agg, ns, wantNs)
			logRows(t, db, agg)
		}
	}
}

// logRows logs the outbox rows of agg.
func logRows(t *testing.T, db *gorm.DB, agg string) {
	t.Helper()
	var rows []struct {
		Seq                               int64
		Type, Payload                     string
		Attempts, Strikes                 int
		CreatedAt, AvailableAt            time.Time
		ProcessedAt, DeadAt, LastFailedAt *time.Time
	}
	testkit.Must(t, db.Raw(`SELECT seq, type, payload::text AS payload, attempts, strikes, created_at, available_at,
processed_at, dead_at, last_failed_at FROM outbox_messages WHERE aggregate_id = ? ORDER BY seq`, agg).Scan(&rows).Error)
	for _, r := range rows {
		t.Logf("%s row %d %s %s attempts %d strikes %d created %v available %v processed %v dead %v failed %v", agg, r.Seq,
			r.Type, r.Payload, r.Attempts, r.Strikes, r.CreatedAt, r.AvailableAt, r.ProcessedAt, r.DeadAt, r.LastFailedAt)
	}
}

// Unordered, with an unordered table relay: the refused events die in the
// table, every other event is published from the WAL, nothing else parked.
func TestParkRefusedUnordered(t *testing.T) {
	db, rs := setupAggs(t)
	gc := ordered()
	c := collect(t, gc)
	b := &broker{pub: gc, refuse: "poison"}
	start(t, rs.with(t, b, walrelay.Config{}))
	tr, err := relay.New(db, b, relay.Config{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retention: time.Hour, Logger: testkit.Quiet()})
	testkit.Must(t, err)
	testkit.Run(t, tr.Run)
	const writers, aggs, per = 4, 8, 8
	poisoned := map[string]bool{"a0": true, "a3": true, "a6": true}
	writeAggs(t, db, writers, aggs, 0, per, poisoned)
	want := aggs*per - len(poisoned)
	waitFor(t, "the publishes and deaths", func() bool {
		return len(c.deliveries()) >= want &&
			count(t, db, `SELECT count(*) FROM outbox_messages WHERE type = 'poison' AND dead_at IS NOT NULL`) == len(poisoned)
	})
	if n := count(t, db, `SELECT count(*) FROM outbox_messages`); n != len(poisoned) {
		t.Errorf("%d rows, want the %d refused", n, len(poisoned))
	}
	ds := c.deliveries()
	if len(ds) != want {
		t.Errorf("%d published, want %d", len(ds), want)
	}
	for agg, ns := range byAgg(ds) {
		slices.Sort(ns)
		wantNs := seq(0, per)
		if poisoned[agg] {
			wantNs = seq(0, per, 3)
		}
		if !slices.Equal(ns, wantNs) {
			t.Errorf("published of %s: %v, want %v", agg, ns, wantNs)
		}
	}
}

// A broker outage under live traffic parks nothing and loses nothing: once
// it is back every event is published, each aggregate's in order; also
// when the relay holds so many that it stops reading (MaxHeld).
func TestOutageParksNothing(t *testing.T) {
	t.Parallel()
	for name, maxHeld := range map[string]int{"default": 0, "MaxHeld": 5} {
		t.Run(name, func(t *testing.T) { testOutage(t, maxHeld) })
	}
}

func testOutage(t *testing.T, maxHeld int) {
	db, rs := setupAggs(t)
	gc := ordered()
	c := collect(t, gc)
	b := &broker{pub: gc}
	start(t, rs.with(t, b, walrelay.Config{Ordered: true, MaxHeld: maxHeld}))
	const writers, aggs, per = 4, 12, 30
	writeAggs(t, db, writers, aggs, 0, 5, nil)
	waitFor(t, "some publishes", func() bool { return len(c.deliveries()) >= 20 })
	b.down.Store(true)
	began := time.Now()
	// The rest is written once the broker is down, so that the outage meets
	// events however fast the first ones went out.
	written := make(chan struct{})
	go func() {
		defer close(written)
		writeAggs(t, db, writers, aggs, 5, per, nil)
	}()
	waitFor(t, "failures", func() bool { return b.failed.Load() >= 20 && time.Since(began) > 500*time.Millisecond })
	b.down.Store(false)
	<-written
	waitFor(t, "every event", func() bool {
		if n := count(t, db, `SELECT count(*) FROM outbox_messages`); n != 0 {
			t.Fatalf("the outage parked %d events", n)
		}
		return len(c.deliveries()) >= aggs*per
	})
	if len(c.deliveries()) != aggs*per {
		t.Errorf("%d published, want %d", len(c.deliveries()), aggs*per)
	}
	for agg, ns := range byAgg(c.deliveries()) {
		if !slices.Equal(ns, seq(0, per)) {
			t.Errorf("published of %s: %v", agg, ns)
		}
	}
	t.Logf("failed calls during the outage: %d", b.failed.Load())
}

// A publisher failing one event type with a plain error while others pass:
// the failure is confirmed by the next success, and the event parked.
func TestParkConfirmedFailure(t *testing.T) {
	db, rs := setupAggs(t)
	gc := ordered()
	c := collect(t, gc)
	start(t, rs.ordered(t, &plainRefuser{pub: gc}))
	writeAggs(t, db, 2, 4, 0, 6, map[string]bool{"a1": true})
	waitFor(t, "the others", func() bool { return len(c.deliveries()) >= 3*6+3 })
	waitFor(t, "the parked", func() bool { return count(t, db, `SELECT count(*) FROM outbox_messages`) == 3 })
	if n := count(t, db, `SELECT count(*) FROM outbox_messages WHERE type = 'poison' AND attempts = 1
AND last_error = 'no such topic'`); n != 1 {
		t.Fatalf("%d failed events parked with their error, want 1", n)
	}
}

// A refusal that does not wrap relay.ErrRejected, parked: the table relay
// kills it, its strikes confirmed by the WAL relay's publishes (its
// Confirmer), and then publishes the events parked behind it; without the
// Confirmer nothing in the table would confirm them. Under live writes.
func TestParkedPlainRefusalDies(t *testing.T) {
	db, rs := setupAggs(t)
	gc := ordered()
	c := collect(t, gc)
	pub := &plainRefuser{pub: gc}
	wr := rs.ordered(t, pub)
	start(t, wr)
	tr, err := relay.New(db, pub, relay.Config{Ordered: true, MaxAttempts: 3, MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retention: time.Hour,
		Confirmer: wr, Logger: testkit.Quiet()})
	testkit.Must(t, err)
	testkit.Run(t, tr.Run)
	const aggs, per = 6, 10
	poisoned := map[string]bool{"a1": true, "a4": true}
	// Live traffic while the refused ones are retried: the writers go on.
	writeCtx, stopWriting := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stopWriting(); wg.Wait() })
	wg.Go(func() {
		for n := 0; writeCtx.Err() == nil; n++ { // aggregates of their own
			save(t, db, fmt.Sprintf("live%d", n%4), n/4, false)
			time.Sleep(5 * time.Millisecond)
		}
	})
	writeAggs(t, db, 2, aggs, 0, per, poisoned)
	t.Cleanup(func() {
		if t.Failed() {
			for agg := range poisoned {
				logRows(t, db, agg)
			}
		}
	})
	waitFor(t, "the refused events dead", func() bool {
		return count(t, db, `SELECT count(*) FROM outbox_messages WHERE type = 'poison' AND dead_at IS NOT NULL`) == len(poisoned)
	})
	stopWriting()
	wg.Wait()
	drainedOnlyRefusedDead(t, db)
	// Each aggregate's events in order, the refused ones missing.
	for agg, ns := range byAgg(c.deliveries()) {
		if !slices.IsSorted(ns) {
			t.Errorf("published of %s out of order: %v", agg, ns)
			logRows(t, db, agg)
		}
		if poisoned[agg] && slices.Contains(ns, 3) {
			t.Errorf("the refused event of %s was published: %v", agg, ns)
		}
	}
}

// Two events that always fail with a plain error, back to back in one
// transaction, look like an outage at first: every event after them is
// held untried. Under live traffic of other aggregates each is still told
// to fail alone (a success follows its failure) and parked, and the live
// events all go out: the retries do not keep trying the two in a row.
func TestBackToBackRefusalsParked(t *testing.T) {
	db, rs := setupAggs(t)
	gc := ordered()
	c := collect(t, gc)
	start(t, rs.ordered(t, &plainRefuser{pub: gc}))
	testkit.Must(t, db.Transaction(func(tx *gorm.DB) error {
		for _, agg := range []string{"a1", "a4"} {
			it := &item{ID: uuid.New(), Agg: agg}
			it.Record(Poison{Agg: agg})
			if err := tx.Create(it).Error; err != nil {
				return err
			}
		}
		return nil
	}))
	const live = 40
	for n := range live {
		save(t, db, fmt.Sprintf("live%d", n%4), n/4, false)
		time.Sleep(5 * time.Millisecond)
	}
	waitFor(t, "both parked and the live events published", func() bool {
		return count(t, db, `SELECT count(*) FROM outbox_messages WHERE type = 'poison'`) == 2 &&
			len(c.deliveries()) == live
	})
	for agg, ns := range byAgg(c.deliveries()) {
		if !slices.Equal(ns, seq(0, live/4)) {
			t.Errorf("published of %s: %v", agg, ns)
		}
	}
}

// plainRefuser fails poison events with an error that does not say the
// broker refused them.
type plainRefuser struct{ pub message.Publisher }

func (p *plainRefuser) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.Metadata.Get(events.MetaType) == "poison" {
			return errors.New("no such topic")
		}
	}
	return p.pub.Publish(topic, msgs...)
}

func (p *plainRefuser) Close() error { return nil }

// Two relays on one slot: the second waits while the first streams, and
// takes over when it stops; nothing is lost.
func TestTakeover(t *testing.T) {
	db, rs := setup(t)
	pub := ordered()
	ch, err := pub.Subscribe(context.Background(), topic)
	testkit.Must(t, err)
	walsender := func() (pid int) {
		testkit.Must(t, db.Raw(`SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = ?`, rs.slot).Scan(&pid).Error)
		return pid
	}
	stop1 := start(t, rs.new(t, pub))
	waitFor(t, "the first relay", func() bool { return walsender() != 0 })
	first := walsender()
	warns := &levelCounter{min: slog.LevelWarn}
	second, err := walrelay.New(rs.dsn, pub, walrelay.Config{Slot: rs.slot, Logger: slog.New(warns),
		RetryInterval: 20 * time.Millisecond, StatusInterval: 50 * time.Millisecond})
	testkit.Must(t, err)
	start(t, second)
	write(t, db, 0, 5)
	got := map[string]bool{}
	take := func(n int) {
		deadline := time.After(30 * time.Second)
		for len(got) < n {
			select {
			case m := <-ch:
				m.Ack()
				got[string(m.Payload)] = true
			case <-deadline:
				t.Fatalf("received %d of %d: %v", len(got), n, got)
			}
		}
	}
	take(5)
	if now := walsender(); now != first {
		t.Fatalf("the slot's walsender changed from %d to %d while the first relay ran", first, now)
	}
	if n := warns.n.Load(); n != 0 {
		t.Errorf("the waiting relay logged %d warnings", n)
	}
	stop1()
	waitFor(t, "the second relay", func() bool { return walsender() != 0 && walsender() != first })
	write(t, db, 5, 10)
	take(10)
	for _, p := range payloads(0, 10) {
		if !got[p] {
			t.Errorf("%s not published", p)
		}
	}
}

// levelCounter is a slog handler that counts the records at min or above.
type levelCounter struct {
	min slog.Level
	n   atomic.Int64
}

func (h *levelCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }

func (h *levelCounter) Handle(context.Context, slog.Record) error { h.n.Add(1); return nil }

func (h *levelCounter) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *levelCounter) WithGroup(string) slog.Handler { return h }

// A relay that takes over (or restarts) in ordered mode reads which
// aggregates have parked events first: the later events of one parked by
// the relay before it are parked behind them, not published.
func TestTakeoverKeepsParked(t *testing.T) {
	db, rs := setupAggs(t)
	gc := ordered()
	c := collect(t, gc)
	b := &broker{pub: gc, refuse: "poison"}
	stop := start(t, rs.ordered(t, b))
	save(t, db, "a0", 0, false)
	save(t, db, "a0", 1, true)
	save(t, db, "a1", 0, false)
	waitFor(t, "the first relay", func() bool {
		return len(c.deliveries()) == 2 && count(t, db, `SELECT count(*) FROM outbox_messages`) == 1
	})
	waitConfirmed(t, db, rs.slot) // else the next relay streams them again, which proves nothing
	stop()
	start(t, rs.ordered(t, b))
	save(t, db, "a0", 2, false)
	save(t, db, "a1", 1, false)
	waitFor(t, "the second relay", func() bool {
		if got := byAgg(c.deliveries())["a0"]; len(got) > 1 {
			t.Fatalf("a0's events published behind its parked one: %v", got)
		}
		return len(c.deliveries()) == 3 && count(t, db, `SELECT count(*) FROM outbox_messages`) == 2
	})
	if n := count(t, db, `SELECT count(*) FROM outbox_messages WHERE aggregate_id = 'a0' AND type = 'step' AND attempts = 0`); n != 1 {
		t.Fatalf("%d later events of a0 parked by the second relay, want 1", n)
	}
	if got := byAgg(c.deliveries()); !slices.Equal(got["a0"], []int{0}) || !slices.Equal(got["a1"], []int{0, 1}) {
		t.Fatalf("published %v", got)
	}
}

// drainedOnlyRefusedDead waits for the outbox table to drain (every row
// published or dead) and checks that only the refused events died.
func drainedOnlyRefusedDead(t *testing.T, db *gorm.DB) {
	t.Helper()
	waitFor(t, "the table drained", func() bool {
		return count(t, db, `SELECT count(*) FROM outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL`) == 0
	})
	if n := count(t, db, `SELECT count(*) FROM outbox_messages WHERE dead_at IS NOT NULL AND type <> 'poison'`); n != 0 {
		t.Fatalf("%d events died that were not refused", n)
	}
}
