package conformance

// The inbox's deduplication by intent (a deduplication key carried in the
// message metadata) and its renamed consumers (FormerConsumers), on each
// database.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// TestInboxIntent: messages that carry a deduplication key
// (events.MetaDedupKey) take effect once per (consumer, key).
func TestInboxIntent(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, dl testkit.Dialect) {
		for _, c := range []namedTest{
			{"TwoEventsOneKey", testIntentTwoEventsOneKey},
			{"OneKeyTwoConsumers", testIntentOneKeyTwoConsumers},
			{"LongBinaryKey", testIntentLongBinaryKey},
			{"ThroughTheOutbox", testIntentThroughTheOutbox},
			{"IDRowsOfEarlierVersions", testIntentIDRowsOfEarlierVersions},
			{"LookupsBlockNoInsert", testIntentLookupsBlockNoInsert},
		} {
			t.Run(c.name, func(t *testing.T) { c.f(t, dl) })
		}
	})
}

// TestInboxRename: a consumer renamed with its former names keeps its
// duplicates; renamed without them, it handles them again.
func TestInboxRename(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, dl testkit.Dialect) {
		for _, c := range []namedTest{
			{"WithFormerName", testRenameWithFormerName},
			{"WithoutFormerName", testRenameWithoutFormerName},
			{"RouterHandlerRenamed", testRenameRouterHandler},
			{"StartWarnings", testRenameStartWarnings},
		} {
			t.Run(c.name, func(t *testing.T) { c.f(t, dl) })
		}
	})
}

// keyed is a message with a new UUID carrying the deduplication key k.
func keyed(k string) *message.Message {
	m := message.NewMessage(uuid.NewString(), nil)
	m.Metadata.Set(events.MetaDedupKey, k)
	return m
}

// handle hands msg to h and fails the test on an error.
func handle(t *testing.T, h message.HandlerFunc, msg *message.Message) {
	t.Helper()
	if _, err := h(msg); err != nil {
		t.Fatalf("handle %s: %v", msg.UUID, err)
	}
}

// effectHandler is a handler that writes an Effect per message in the
// inbox's transaction; calls counts its calls.
func effectHandler(calls *atomic.Int64) message.HandlerFunc {
	return noPublish(recordEffect(calls))
}

func intentStored(k string) string {
	sum := sha256.Sum256([]byte(k))
	return "#sha256:key:" + hex.EncodeToString(sum[:])
}

// Two events of one intent (new ids, one key) take effect once; redelivering
// either is a duplicate; another key, and message ids equal to the key or to
// its stored form, are other messages.
func testIntentTwoEventsOneKey(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var calls atomic.Int64
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(effectHandler(&calls))
	first, second := keyed("refund order-42"), keyed("refund order-42")
	for _, m := range []*message.Message{first, second, first.Copy(), second.Copy()} {
		handle(t, h, m)
	}
	if calls.Load() != 1 || e.count("effects") != 1 {
		t.Fatalf("two events of one key: %d calls, %d effects, want 1", calls.Load(), e.count("effects"))
	}
	if fx := e.effects(); fx[first.UUID] != 1 {
		t.Fatalf("effects %v, want the first event's", fx)
	}
	// Not the key's namespace: a message whose id is the key, or the key's
	// stored form, without a key; another key.
	handle(t, h, message.NewMessage("refund order-42", nil))
	handle(t, h, message.NewMessage(intentStored("refund order-42"), nil))
	handle(t, h, keyed("refund order-43"))
	// A key equal to an id handled before is not that id.
	handle(t, h, message.NewMessage("plain", nil))
	handle(t, h, keyed("plain"))
	if calls.Load() != 6 {
		t.Fatalf("%d calls, want 6: a key and an id were taken for one another", calls.Load())
	}
	// One row per key: the two events' key is one row.
	if n := e.count("inbox_messages"); n != 6 {
		t.Fatalf("%d inbox rows, want 6", n)
	}
}

// One key deduplicates per consumer: each consumer takes effect once.
func testIntentOneKeyTwoConsumers(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var billing, shipping atomic.Int64
	hb := e.inbox(inbox.Config{Consumer: "billing"}).Middleware(effectHandler(&billing))
	hs := e.inbox(inbox.Config{Consumer: "shipping"}).Middleware(effectHandler(&shipping))
	for range 2 {
		m := keyed("order-7")
		handle(t, hb, m.Copy())
		handle(t, hs, m.Copy())
	}
	if billing.Load() != 1 || shipping.Load() != 1 || e.count("effects") != 2 {
		t.Fatalf("billing %d, shipping %d calls, %d effects, want 1, 1, 2", billing.Load(), shipping.Load(), e.count("effects"))
	}
}

// A key of 1,000 bytes with a NUL byte and a trailing space deduplicates
// on every database, apart from the key without the space, with another
// space, or with invalid UTF-8.
func testIntentLongBinaryKey(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	k := strings.Repeat("k", 500) + "\x00" + strings.Repeat("y", 498) + " "
	if len(k) != 1000 {
		t.Fatalf("key of %d bytes", len(k))
	}
	var calls atomic.Int64
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(effectHandler(&calls))
	for range 2 {
		handle(t, h, keyed(k))
	}
	if calls.Load() != 1 {
		t.Fatalf("the long key: %d calls, want 1", calls.Load())
	}
	others := []string{strings.TrimSuffix(k, " "), k + " ", k[:999] + "\xff"}
	for range 2 {
		for _, o := range others {
			handle(t, h, keyed(o))
		}
	}
	if calls.Load() != 1+int64(len(others)) {
		t.Fatalf("%d calls, want %d: keys differing by a trailing space or a byte are one", calls.Load(), 1+len(others))
	}
}

// refundRequested is an event of one intent per order: its deduplication
// key (events.Deduplicated).
type refundRequested struct{ Order string }

func (refundRequested) EventType() string  { return "refund.requested" }
func (r refundRequested) DedupKey() string { return "refund:" + r.Order }

// An event that is events.Deduplicated is stored with its key in its
// metadata; the messages the relay makes of two such events (two ids, one
// key) take effect once. Metadata given when recorded wins.
func testIntentThroughTheOutbox(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	must(t, e.db.Transaction(func(tx *gorm.DB) error {
		return outboxhook.Add(tx, refundRequested{"42"}, refundRequested{"42"})
	}))
	rows := testkit.Outbox(t, e.db)
	if len(rows) != 2 {
		t.Fatalf("%d outbox rows, want 2", len(rows))
	}
	var calls atomic.Int64
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(effectHandler(&calls))
	for _, r := range rows {
		if got := r.Metadata[events.MetaDedupKey]; got != "refund:42" {
			t.Fatalf("stored %s = %q, want %q", events.MetaDedupKey, got, "refund:42")
		}
		msg := relay.NewMessage(events.Envelope{ID: r.ID, Type: r.Type, Version: r.Version, Topic: r.Topic,
			OccurredAt: time.Now().UTC(), Payload: []byte(r.Payload), Metadata: r.Metadata})
		if msg.Metadata.Get(events.MetaDedupKey) != "refund:42" {
			t.Fatalf("the relay's message carries no key: %v", msg.Metadata)
		}
		handle(t, h, msg)
	}
	if calls.Load() != 1 {
		t.Fatalf("two events of one key through the outbox: %d calls, want 1", calls.Load())
	}
}

// A message with a key that an earlier version recorded by its id (before
// keys) is a duplicate, unless DisableLegacyKeys.
func testIntentIDRowsOfEarlierVersions(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	e.inbox(inbox.Config{}) // the table
	at, arg := dl.SQL.Ago(0)
	earlier, disabled := keyed("k1"), keyed("k2")
	for _, m := range []*message.Message{earlier, disabled} {
		must(t, e.db.Exec(`INSERT INTO inbox_messages (consumer, message_id, processed_at) VALUES (?, ?, `+at+`)`,
			"c", m.UUID, arg).Error)
	}
	var calls atomic.Int64
	handle(t, e.inbox(inbox.Config{Consumer: "c"}).Middleware(effectHandler(&calls)), earlier)
	if calls.Load() != 0 {
		t.Fatal("a message recorded by id before keys was handled again")
	}
	handle(t, e.inbox(inbox.Config{Consumer: "c", DisableLegacyKeys: true}).Middleware(effectHandler(&calls)), disabled)
	if calls.Load() != 1 {
		t.Fatal("with DisableLegacyKeys, the id was looked up")
	}
}

// The handler's transaction, having looked a keyed message up under former
// names and earlier keys and inserted its key, holds no lock that makes
// another message's insert next to those keys, or an outbox save, wait (on
// MySQL and MariaDB: at REPEATABLE READ, where a locking read of a missing
// key takes a gap lock).
func testIntentLookupsBlockNoInsert(t *testing.T, dl testkit.Dialect) {
	if dl.SQL.OneWriter() {
		t.Skip("one writer at a time: every other insert waits")
	}
	e := newInboxEnv(t, dl)
	at, arg := dl.SQL.Ago(0)
	raw := func(ctx context.Context, consumer, id string) error {
		return e.db.WithContext(ctx).Exec(`INSERT INTO inbox_messages (consumer, message_id, processed_at) VALUES (?, ?, `+at+`)`,
			consumer, id, arg).Error
	}
	const key = "m"
	stored := intentStored(key)
	id := uuid.NewString()
	in := e.inbox(inbox.Config{Consumer: "new", FormerConsumers: map[string][]string{"new": {"old", "older"}}})
	// The gaps the lookups fall in are bounded.
	for _, c := range []string{"new", "old", "older"} {
		for _, bound := range []string{"#", "#sha256:key:~", "0", "~"} {
			must(t, raw(context.Background(), c, bound))
		}
	}
	var calls atomic.Int64
	others := e.inbox(inbox.Config{Consumer: "other"}).Middleware(effectHandler(&calls))
	done := make(chan error, 1)
	h := in.Middleware(noPublish(func(msg *message.Message) error {
		wantRepeatableRead(t, dl, inbox.Tx(msg.Context()))
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var errs []error
			// Next to every key the transaction read or wrote.
			for _, c := range []string{"new", "old", "older"} {
				for _, near := range []string{stored + "!", stored[:len(stored)-1], id + "!", id[:len(id)-1]} {
					if err := raw(ctx, c, near); err != nil {
						errs = append(errs, errors.Join(errors.New("insert ("+c+", "+near+")"), err))
					}
				}
			}
			// Another consumer's message of the same key, through the inbox.
			m := keyed(key)
			m.SetContext(ctx)
			if _, err := others(m); err != nil {
				errs = append(errs, errors.Join(errors.New("another consumer's message"), err))
			}
			// An outbox save.
			if err := e.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return outboxhook.Add(tx, refundRequested{"7"})
			}); err != nil {
				errs = append(errs, errors.Join(errors.New("outbox save"), err))
			}
			done <- errors.Join(errs...)
		}()
		return <-done
	}))
	m := message.NewMessage(id, nil)
	m.Metadata.Set(events.MetaDedupKey, key)
	handle(t, h, m)
	if calls.Load() != 1 {
		t.Errorf("another consumer's message handled %d times, want 1", calls.Load())
	}
}

// A consumer renamed with its former name listed keeps its duplicates, by id
// and by key; new rows go under the new name.
func testRenameWithFormerName(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var calls atomic.Int64
	before := e.inbox(inbox.Config{Consumer: "ship"}).Middleware(effectHandler(&calls))
	byID, byKey := message.NewMessage(uuid.NewString(), nil), keyed("order-1")
	handle(t, before, byID.Copy())
	handle(t, before, byKey.Copy())
	after := e.inbox(inbox.Config{Consumer: "shipping", FormerConsumers: map[string][]string{"shipping": {"ship"}}}).
		Middleware(effectHandler(&calls))
	handle(t, after, byID.Copy())
	handle(t, after, byKey.Copy())
	handle(t, after, keyed("order-1")) // another event of the intent
	if calls.Load() != 2 {
		t.Fatalf("%d calls, want 2: the rename reopened duplicates", calls.Load())
	}
	fresh := message.NewMessage(uuid.NewString(), nil)
	handle(t, after, fresh.Copy())
	handle(t, after, fresh.Copy())
	if calls.Load() != 3 {
		t.Fatalf("%d calls, want 3", calls.Load())
	}
	var consumer string
	must(t, e.db.Raw(`SELECT consumer FROM inbox_messages WHERE message_id = ?`, fresh.UUID).Scan(&consumer).Error)
	if consumer != "shipping" {
		t.Fatalf("the new row is under %q, want %q", consumer, "shipping")
	}
}

// A router's handler renamed, the inbox on the router (the handler names
// are the consumers) with the handler's former name: the messages the old
// handler handled are duplicates for the renamed one, and only for it.
func testRenameRouterHandler(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var calls atomic.Int64
	route := func(cfg inbox.Config, handlers ...string) *gochannel.GoChannel {
		gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		must(t, err)
		router.AddMiddleware(e.inbox(cfg).Middleware)
		for _, name := range handlers {
			router.AddConsumerHandler(name, "orders", gc, recordEffect(&calls))
		}
		runRouter(t, router)
		return gc
	}
	effects := func(handler, id string) int64 {
		var n int64
		must(t, e.db.Model(&Effect{}).Where("consumer = ? AND message_id = ?", handler, id).Count(&n).Error)
		return n
	}
	old := message.NewMessage(uuid.NewString(), nil)
	must(t, route(inbox.Config{}, "ship").Publish("orders", old.Copy()))
	waitFor(t, "the first handler's effect", func() bool { return effects("ship", old.UUID) == 1 })

	gc := route(inbox.Config{FormerConsumers: map[string][]string{"shipping": {"ship"}}}, "shipping", "billing")
	fresh := message.NewMessage(uuid.NewString(), nil)
	must(t, gc.Publish("orders", old.Copy(), fresh.Copy()))
	waitFor(t, "the new message's effects", func() bool { return effects("shipping", fresh.UUID) == 1 && effects("billing", fresh.UUID) == 1 })
	waitFor(t, "billing's effect of the old message", func() bool { return effects("billing", old.UUID) == 1 })
	if n := effects("shipping", old.UUID); n != 0 {
		t.Fatalf("the renamed handler handled the old message %d times, want 0", n)
	}
	if calls.Load() != 4 {
		t.Fatalf("%d calls, want 4", calls.Load())
	}
}

// Renamed without its former name, a consumer is another consumer: it
// handles the messages the old name handled again (the documented
// behaviour).
func testRenameWithoutFormerName(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var calls atomic.Int64
	msg := message.NewMessage(uuid.NewString(), nil)
	handle(t, e.inbox(inbox.Config{Consumer: "ship"}).Middleware(effectHandler(&calls)), msg.Copy())
	handle(t, e.inbox(inbox.Config{Consumer: "shipping"}).Middleware(effectHandler(&calls)), msg.Copy())
	if calls.Load() != 2 || e.count("effects") != 2 {
		t.Fatalf("%d calls, %d effects, want 2 and 2", calls.Load(), e.count("effects"))
	}
}

// logs is a slog handler that keeps the records' levels and messages.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func (l *logs) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.buf.String()
	l.buf.Reset()
	return s
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// New tells, from one query, what it can of a renamed consumer: no rows
// under the new name but some under a former one (warning), none under any
// (warning: misspelled?), none left under the former ones (a note that they
// may go); nothing when both have rows.
func testRenameStartWarnings(t *testing.T, dl testkit.Dialect) {
	e := newInboxEnv(t, dl)
	var l logs
	cfg := inbox.Config{Consumer: "shipping", FormerConsumers: map[string][]string{"shipping": {"ship"}}, Logger: l.logger()}
	start := func() (string, *inbox.Inbox) { in := e.inbox(cfg); return l.take(), in }
	if out, _ := start(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "check that FormerConsumers spells") {
		t.Errorf("no rows anywhere: logged %q", out)
	}
	var calls atomic.Int64
	handle(t, e.inbox(inbox.Config{Consumer: "ship"}).Middleware(effectHandler(&calls)), message.NewMessage(uuid.NewString(), nil))
	out, in := start()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "former=[ship]") || !strings.Contains(out, "no rows under its name") {
		t.Errorf("rows under the former name only: logged %q", out)
	}
	handle(t, in.Middleware(effectHandler(&calls)), message.NewMessage(uuid.NewString(), nil))
	if out, _ := start(); out != "" {
		t.Errorf("rows under both names: logged %q", out)
	}
	must(t, e.db.Exec(`DELETE FROM inbox_messages WHERE consumer = ?`, "ship").Error)
	if out, _ := start(); !strings.Contains(out, "level=INFO") || !strings.Contains(out, "can be removed") {
		t.Errorf("no rows left under the former name: logged %q", out)
	}
	// Several consumers (the handler names), each told of its own names.
	for _, c := range []string{"a", "b1", "c", "c0 "} {
		handle(t, e.inbox(inbox.Config{Consumer: c}).Middleware(effectHandler(&calls)), message.NewMessage(uuid.NewString(), nil))
	}
	cfg = inbox.Config{Logger: l.logger(), FormerConsumers: map[string][]string{
		"a": {"a0"}, "b": {"b0", "b1"}, "c": {"c0 "}, "d": {"d0"},
	}}
	out, _ = start()
	for _, want := range []string{
		`level=INFO msg="inbox: no rows are left under the consumer's former names: they can be removed from FormerConsumers" component=herald.inbox consumer=a former=[a0]`,
		`level=WARN msg="inbox: consumer has no rows under its name, but has some under former names: ` +
			`messages recorded under them count as duplicates while they stay in FormerConsumers, which they must until Retention has passed" component=herald.inbox consumer=b former=[b1]`,
		`level=WARN msg="inbox: neither the consumer nor its former names have rows: ` +
			`check that FormerConsumers spells the names the consumer had" component=herald.inbox consumer=d former=[d0]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("logged %q, without %q", out, want)
		}
	}
	if strings.Contains(out, "consumer=c ") || strings.Count(out, "\n") != 3 {
		t.Errorf("logged %q: want 3 lines, none for c", out)
	}
}
