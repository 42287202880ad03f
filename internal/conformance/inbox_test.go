package conformance

// The inbox: exactly-once effects for Watermill handlers, on each database.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// inboxTests are the inbox's conformance tests.
var inboxTests = []namedTest{
	{"DuplicateSkipped", testInboxDuplicateSkipped},
	{"EventIDMetadataWins", testInboxEventIDMetadataWins},
	{"HandlerErrorAndPanicRollBack", testInboxHandlerErrorAndPanicRollBack},
	{"AfterCommit", testInboxAfterCommit},
	{"InvalidIDs", testInboxInvalidIDs},
	{"LongAndUnstorableIDs", testInboxLongAndUnstorableIDs},
	{"ConcurrentDeliveries", testInboxConcurrentDeliveries},
	{"RetentionCleanup", testInboxRetentionCleanup},
	{"ConsumerBadInputToPoisonQueue", testInboxConsumerBadInputToPoisonQueue},
	{"RouterHandlerNamesAndProducedMessages", testInboxRouterHandlerNamesAndProducedMessages},
	{"ProducedMessagesWithCopiedMetadata", testInboxProducedMessagesWithCopiedMetadata},
	{"TrailingSpaceIDs", testInboxTrailingSpaceIDs},
	{"HashPrefixIDs", testInboxHashPrefixIDs},
	{"KeysOfEarlierVersions", testInboxKeysOfEarlierVersions},
	{"EarlierKeysLookupBlocksNoInsert", testInboxEarlierKeysLookupBlocksNoInsert},
}

func testInboxDuplicateSkipped(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var calls atomic.Int64
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(recordEffect(&calls)))
	msg := message.NewMessage(uuid.NewString(), []byte(`{}`))
	for range 3 {
		if out, err := h(msg.Copy()); err != nil || out != nil {
			t.Fatalf("h = %v, %v", out, err)
		}
	}
	if calls.Load() != 1 || e.effects()[msg.UUID] != 1 {
		t.Fatalf("calls %d, effects %v", calls.Load(), e.effects())
	}
	// Another consumer handles it once too.
	h2 := e.inbox(inbox.Config{Consumer: "other"}).Middleware(noPublish(recordEffect(&calls)))
	if _, err := h2(msg.Copy()); err != nil || calls.Load() != 2 {
		t.Fatalf("other consumer: %v, calls %d", err, calls.Load())
	}
}

func testInboxEventIDMetadataWins(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var calls atomic.Int64
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(recordEffect(&calls)))
	id := uuid.NewString()
	a := message.NewMessage(uuid.NewString(), nil)
	a.Metadata.Set(events.MetaID, id)
	b := message.NewMessage(uuid.NewString(), nil) // a broker gave it a new UUID
	b.Metadata.Set(events.MetaID, id)
	for _, m := range []*message.Message{a, b} {
		if _, err := h(m); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("handled %d times", calls.Load())
	}
}

func testInboxHandlerErrorAndPanicRollBack(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var calls atomic.Int64
	fail := atomic.Int32{} // 1: error, 2: panic
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(func(msg *message.Message) error {
		if err := recordEffect(&calls)(msg); err != nil {
			return err
		}
		switch fail.Load() {
		case 1:
			return errors.New("downstream refused")
		case 2:
			panic("handler bug")
		}
		return nil
	}))
	msg := message.NewMessage(uuid.NewString(), nil)
	fail.Store(1)
	if _, err := h(msg.Copy()); err == nil || !strings.Contains(err.Error(), "downstream refused") {
		t.Fatalf("error = %v", err)
	}
	fail.Store(2)
	if _, err := h(msg.Copy()); !errors.Is(err, inbox.ErrHandlerPanic) {
		t.Fatalf("panic error = %v", err)
	}
	if len(e.effects()) != 0 || e.count("inbox_messages") != 0 {
		t.Fatal("a failed handler's effect or inbox row was kept")
	}
	fail.Store(0)
	if _, err := h(msg.Copy()); err != nil {
		t.Fatal(err)
	}
	if _, err := h(msg.Copy()); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 || e.effects()[msg.UUID] != 1 {
		t.Fatalf("calls %d, effects %v", calls.Load(), e.effects())
	}
}

// AfterCommit's functions run once the handler's writes committed (another
// connection sees them), and never after a rollback or for a duplicate.
func testInboxAfterCommit(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var calls atomic.Int64
	fail := atomic.Bool{}
	var ran []string
	var seenThen []int
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(func(msg *message.Message) error {
		if err := recordEffect(&calls)(msg); err != nil {
			return err
		}
		if !inbox.AfterCommit(msg.Context(), func() {
			ran = append(ran, msg.UUID)
			seenThen = append(seenThen, e.effects()[msg.UUID]) // read outside the handler's transaction
		}) {
			t.Error("AfterCommit returned false inside the middleware")
		}
		if fail.Load() {
			return errors.New("downstream refused")
		}
		return nil
	}))
	msg := message.NewMessage(uuid.NewString(), nil)
	fail.Store(true)
	if _, err := h(msg.Copy()); err == nil {
		t.Fatal("the failing handler's error was lost")
	}
	if len(ran) != 0 {
		t.Fatalf("ran after a rollback: %v", ran)
	}
	fail.Store(false)
	for range 2 { // the second delivery is a duplicate
		if _, err := h(msg.Copy()); err != nil {
			t.Fatal(err)
		}
	}
	if len(ran) != 1 || ran[0] != msg.UUID || seenThen[0] != 1 {
		t.Fatalf("ran %v, effects visible then %v; want once, after the commit", ran, seenThen)
	}
	if inbox.AfterCommit(context.Background(), func() {}) {
		t.Fatal("AfterCommit outside the middleware returned true")
	}
}

func testInboxInvalidIDs(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var calls atomic.Int64
	missing := message.NewMessage("", nil)
	malformed := message.NewMessage(uuid.NewString(), nil)
	malformed.Metadata.Set(events.MetaID, "not-a-uuid")
	nack := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(recordEffect(&calls)))
	if _, err := nack(missing); !errors.Is(err, inbox.ErrMissingID) {
		t.Fatalf("missing id: %v", err)
	}
	if _, err := nack(malformed); !errors.Is(err, inbox.ErrMalformedID) {
		t.Fatalf("malformed id: %v", err)
	}
	ack := e.inbox(inbox.Config{Consumer: "c", InvalidID: inbox.AckAndLog, Logger: quiet()}).Middleware(noPublish(recordEffect(&calls)))
	for _, m := range []*message.Message{missing, malformed} {
		if out, err := ack(m); err != nil || out != nil {
			t.Fatalf("ack and log: %v, %v", out, err)
		}
	}
	if calls.Load() != 0 {
		t.Fatal("handler called for a message with no usable id")
	}
}

// Two consumers receive the same message at the same moment: exactly one runs
// the handler's effect; the other waits on the key, then sees a duplicate. If
// the first fails, the second runs it.
func testInboxConcurrentDeliveries(t *testing.T, dl testkit.Dialect) {
	for _, firstFails := range []bool{false, true} {
		t.Run(map[bool]string{false: "first commits", true: "first fails"}[firstFails], func(t *testing.T) {
			e := newInboxEnv(t, dl)
			var calls atomic.Int64
			started := make(chan struct{}, 2)
			h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(func(msg *message.Message) error {
				n := calls.Add(1)
				started <- struct{}{}
				if err := recordEffect(&atomic.Int64{})(msg); err != nil {
					return err
				}
				time.Sleep(300 * time.Millisecond) // hold the key while the other delivery arrives
				if firstFails && n == 1 {
					return errors.New("first delivery fails")
				}
				return nil
			}))
			msg := message.NewMessage(uuid.NewString(), nil)
			var (
				wg   sync.WaitGroup
				errs = make([]error, 2)
				took = make([]time.Duration, 2)
			)
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i == 1 {
						<-started // the first is inside its transaction, key taken
						started <- struct{}{}
					}
					t0 := time.Now()
					_, errs[i] = h(msg.Copy())
					took[i] = time.Since(t0)
				}()
			}
			wg.Wait()
			if got := e.effects()[msg.UUID]; got != 1 {
				t.Fatalf("%d effects, want exactly 1", got)
			}
			if firstFails {
				if errs[0] == nil || errs[1] != nil || calls.Load() != 2 {
					t.Fatalf("errs %v, calls %d", errs, calls.Load())
				}
			} else {
				if errs[0] != nil || errs[1] != nil || calls.Load() != 1 {
					t.Fatalf("errs %v, calls %d", errs, calls.Load())
				}
			}
			if took[1] < 150*time.Millisecond {
				t.Fatalf("the second delivery did not wait on the key (%v)", took[1])
			}
		})
	}
}

func testInboxRetentionCleanup(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	in := e.inbox(inbox.Config{Retention: 600 * time.Millisecond, CleanupBatch: 7})
	h := in.Middleware(noPublish(func(*message.Message) error { return nil }))
	handle := func(prefix string, n int) {
		for i := range n {
			m := message.NewMessage(prefix+uuid.NewString(), nil)
			m.SetContext(context.Background())
			_, err := h(m)
			must(t, err)
			_ = i
		}
	}
	handle("old-", 30)
	time.Sleep(900 * time.Millisecond)
	handle("new-", 5)
	n, err := in.Cleanup(context.Background())
	if err != nil || n != 30 {
		t.Fatalf("cleanup deleted %d, %v", n, err)
	}
	if e.count("inbox_messages") != 5 {
		t.Fatal("recent ids removed")
	}
	// Run cleans on its own.
	in2 := e.inbox(inbox.Config{Retention: time.Millisecond, CleanupInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- in2.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for e.count("inbox_messages") != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil || e.count("inbox_messages") != 0 {
		t.Fatalf("Run: %v, %d left", err, e.count("inbox_messages"))
	}
}

type Paid struct{ Amount int }

func (Paid) EventType() string { return "paid" }

// A consumer's bad input: a payload that does not decode and an unknown type are
// permanent failures (events.ErrDecode, events.ErrUnknownType). Behind the inbox
// they roll back like any handler error; Watermill's PoisonQueue, filtered on
// them, diverts the message instead of nacking it forever. The good message is
// handled once.
func testInboxConsumerBadInputToPoisonQueue(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	var reg events.Registry
	reg.MustRegister(Paid{})
	poison, err := middleware.PoisonQueueWithFilter(gc, "poison", func(err error) bool {
		return errors.Is(err, events.ErrDecode) || errors.Is(err, events.ErrUnknownType)
	})
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(poison, e.inbox(inbox.Config{}).Middleware)
	router.AddConsumerHandler("pay", "payments", gc, func(msg *message.Message) error {
		ev, _, err := inbox.Decode(&reg, msg)
		if err != nil {
			return err
		}
		return inbox.Tx(msg.Context()).Create(&Effect{Consumer: "pay", MessageID: msg.UUID + ":" + string(rune('0'+ev.(Paid).Amount))}).Error
	})
	runRouter(t, router)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	poisoned, err := gc.Subscribe(ctx, "poison")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(typ, payload string) *message.Message {
		return relay.NewMessage(events.Envelope{ID: events.NewID(), Type: typ, Version: 1, OccurredAt: time.Now(), Payload: []byte(payload)})
	}
	bad := []*message.Message{mk("paid", `{"Amount":"not a number"}`), mk("refunded", `{}`)}
	for _, m := range append(bad, mk("paid", `{"Amount":5}`)) {
		if err := gc.Publish("payments", m); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for range bad {
		select {
		case m := <-poisoned:
			m.Ack()
			got[m.UUID] = m.Metadata.Get(middleware.ReasonForPoisonedKey)
		case <-time.After(10 * time.Second):
			t.Fatal("bad message not diverted to the poison queue")
		}
	}
	for _, m := range bad {
		if got[m.UUID] == "" {
			t.Fatalf("message %s not poisoned (%v)", m.UUID, got)
		}
	}
	waitFor(t, "the good message's effect", func() bool { return e.count("effects") == 1 })
	if n := e.count("inbox_messages"); n != 1 {
		t.Fatalf("%d inbox rows, want 1: a poisoned message must leave none", n)
	}
	_ = uuid.Nil
}

func runRouter(t *testing.T, r *message.Router) {
	t.Helper()
	testkit.RunRouter(t, r)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, what, cond)
}

// Handlers are deduplicated under their own names, and messages they return
// are written to the outbox in their transaction, then relayed, never published
// by the router.
func testInboxRouterHandlerNamesAndProducedMessages(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	in := e.inbox(inbox.Config{})
	router.AddMiddleware(in.Middleware)
	router.AddHandler("ship", "orders", gc, "shipments", testkit.MustNotPublish{T: t}, func(msg *message.Message) ([]*message.Message, error) {
		tx := inbox.Tx(msg.Context())
		if err := tx.Create(&Effect{Consumer: "ship", MessageID: msg.UUID}).Error; err != nil {
			return nil, err
		}
		out := message.NewMessage(uuid.NewString(), []byte(`{"shipped":true}`))
		out.Metadata.Set(events.MetaType, "shipment.created")
		out.Metadata.Set("causation_id", msg.UUID)
		return []*message.Message{out}, nil
	})
	router.AddConsumerHandler("bill", "orders", gc, func(msg *message.Message) error {
		return inbox.Tx(msg.Context()).Create(&Effect{Consumer: "bill", MessageID: msg.UUID}).Error
	})
	runRouter(t, router)

	msg := message.NewMessage(uuid.NewString(), []byte(`{}`))
	for range 2 { // a duplicate
		if err := gc.Publish("orders", msg.Copy()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both handlers' effects", func() bool { return e.count("effects") == 2 })
	waitFor(t, "both inbox rows", func() bool { return e.count("inbox_messages") == 2 })
	time.Sleep(200 * time.Millisecond) // the duplicate is processed too
	if e.count("effects") != 2 {
		t.Fatalf("%d effects, want 2 (one per handler)", e.count("effects"))
	}
	var consumers []string
	must(t, e.db.Raw(`SELECT consumer FROM inbox_messages ORDER BY consumer`).Scan(&consumers).Error)
	if len(consumers) != 2 || consumers[0] != "bill" || consumers[1] != "ship" {
		t.Fatalf("consumers %v", consumers)
	}
	rows := testkit.Outbox(t, e.db)
	if len(rows) != 1 {
		t.Fatalf("%d outbox rows, want 1", len(rows))
	}
	row, md := rows[0], rows[0].Metadata
	if row.Type != "shipment.created" || row.Topic != "shipments" || md["causation_id"] != msg.UUID {
		t.Fatalf("outbox row %+v", row)
	}

	// The relay publishes it.
	out := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	r, err := relay.New(e.db, out, relay.Config{PollInterval: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	ch, err := out.Subscribe(ctx, "shipments")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		m.Ack()
		if m.Metadata.Get(events.MetaType) != "shipment.created" {
			t.Fatalf("relayed %v", m.Metadata)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's message was not relayed")
	}
}

// A handler that copies the incoming message's metadata onto what it produces
// (to pass a correlation id on) copies the incoming event id too: every produced
// message is still written, under an id of its own.
func testInboxProducedMessagesWithCopiedMetadata(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	in := e.inbox(inbox.Config{Consumer: "fan-out"})
	h := in.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		var out []*message.Message
		for range 3 {
			m := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
			for k, v := range msg.Metadata {
				m.Metadata.Set(k, v)
			}
			out = append(out, m)
		}
		return out, nil
	})
	msg := relay.NewMessage(events.Envelope{ID: events.NewID(), Type: "order.paid", Version: 1, Payload: []byte(`{}`),
		Metadata: events.Metadata{"correlation_id": "c-7"}})
	msg.SetContext(context.Background())
	if _, err := h(msg); err != nil {
		t.Fatal(err)
	}
	rows := testkit.Outbox(t, e.db)
	if len(rows) != 3 {
		t.Fatalf("%d produced messages written, want 3: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if r.ID.String() == msg.UUID {
			t.Fatalf("row %+v", r)
		}
	}
}

// A message id or consumer name longer than the key columns hold (MySQL's
// VARCHAR(255)), or one holding a NUL byte or invalid UTF-8, is handled once
// and deduplicated on every database alike (inbox.MaxKeyBytes).
func testInboxLongAndUnstorableIDs(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	for _, c := range []struct{ name, consumer, id string }{
		{"id of 256 bytes", "c", strings.Repeat("i", 256)},
		{"id of 4,000 bytes", "c", strings.Repeat("é", 2000)},
		{"id with a NUL byte", "c", "a\x00b"},
		{"id with invalid UTF-8", "c", "a\xffb"},
		{"consumer name of 300 bytes", strings.Repeat("c", 300), uuid.NewString()},
		{"longest id stored as given", "c", strings.Repeat("j", inbox.MaxKeyBytes)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			h := e.inbox(inbox.Config{Consumer: c.consumer}).Middleware(noPublish(func(*message.Message) error {
				calls.Add(1)
				return nil
			}))
			for range 2 {
				if _, err := h(message.NewMessage(c.id, nil)); err != nil {
					t.Fatal(err)
				}
			}
			if calls.Load() != 1 {
				t.Fatalf("handled %d times, want 1", calls.Load())
			}
			// A different id of the same long prefix is another message.
			if _, err := h(message.NewMessage(c.id+"x", nil)); err != nil || calls.Load() != 2 {
				t.Fatalf("another id: %v, handled %d times, want 2", err, calls.Load())
			}
		})
	}
}
