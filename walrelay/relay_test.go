package walrelay_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/walrelay"
)

func TestMain(m *testing.M) { pgtest.Main(logicaltest.Wrap(m)) }

type Pinged struct{ N int }

func (Pinged) EventType() string { return "ping" }

const topic = "pings"

// setup opens a database of the logical-level server with the plugin in
// StorageWAL (every event to topic), and the relay's slot made.
func setup(t *testing.T) (*gorm.DB, *relays) {
	t.Helper()
	t.Parallel()
	db, dsn := logicaltest.Open(t, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{
		Storage: outboxhook.StorageWAL,
		Topic:   func(*events.Envelope) string { return topic },
	})))
	rs := &relays{dsn: dsn, slot: logicaltest.SlotName()}
	r := rs.new(t, gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}))
	testkit.Must(t, r.Setup(context.Background()))
	return db, rs
}

// relays makes the relays of one test: on its database and its slot.
type relays struct{ dsn, slot string }

func (rs *relays) new(t *testing.T, pub message.Publisher) *walrelay.Relay {
	t.Helper()
	return newRelay(t, rs.dsn, rs.slot, pub)
}

// ordered is a GoChannel that delivers in publish order: its Publish waits
// for the subscriber's ack (without it each message goes out in a goroutine
// of its own, in any order).
func ordered() *gochannel.GoChannel {
	return gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
}

func newRelay(t *testing.T, dsn, slot string, pub message.Publisher) *walrelay.Relay {
	t.Helper()
	return newRelayBatch(t, dsn, slot, pub, 0)
}

// newRelayBatch is newRelay with Config.BatchSize batch (0: its default).
func newRelayBatch(t *testing.T, dsn, slot string, pub message.Publisher, batch int) *walrelay.Relay {
	t.Helper()
	r, err := walrelay.New(dsn, pub, walrelay.Config{
		Slot: slot, BatchSize: batch,
		Logger: testkit.Quiet(), RetryInterval: 20 * time.Millisecond, StatusInterval: 50 * time.Millisecond,
	})
	testkit.Must(t, err)
	return r
}

// start runs r until the returned stop is called (or the test ends).
func start(t *testing.T, r *walrelay.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// write writes events Pinged{from}..Pinged{to-1}, one transaction each,
// each followed by a rolled-back one.
func write(t *testing.T, db *gorm.DB, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		testkit.Must(t, outboxhook.Add(db, Pinged{N: i}))
		_ = db.Transaction(func(tx *gorm.DB) error {
			testkit.Must(t, outboxhook.Add(tx, Pinged{N: -i}))
			return errors.New("roll back")
		})
	}
}

// receive reads n messages from ch, acking each, and returns their
// payloads; then it checks that nothing more comes within a moment.
func receive(t *testing.T, ch <-chan *message.Message, n int) []string {
	t.Helper()
	var got []string
	deadline := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case m := <-ch:
			m.Ack()
			got = append(got, string(m.Payload))
		case <-deadline:
			t.Fatalf("received %d of %d messages: %v", len(got), n, got)
		}
	}
	select {
	case m := <-ch:
		m.Ack()
		t.Fatalf("unexpected message %s after %v", m.Payload, got)
	case <-time.After(300 * time.Millisecond):
	}
	return got
}

func payloads(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf(`{"N":%d}`, i))
	}
	return out
}

func equal(t *testing.T, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("published %v, want %v", got, want)
	}
}

// Events written in WAL mode are published once each, in commit order, as
// the table relay's messages; rolled-back transactions publish nothing.
func TestRelayPublishesCommitted(t *testing.T) {
	db, rs := setup(t)
	pub := ordered()
	ch, err := pub.Subscribe(context.Background(), topic)
	testkit.Must(t, err)
	write(t, db, 0, 5)
	start(t, rs.new(t, pub))
	write(t, db, 5, 10)
	testkit.Must(t, db.Transaction(func(tx *gorm.DB) error { // three events of one transaction, in order
		return outboxhook.Add(tx, Pinged{N: 10}, Pinged{N: 11}, Pinged{N: 12})
	}))
	got := receive(t, ch, 13)
	equal(t, got, payloads(0, 13))
}

// The message carries the envelope as the table relay's does.
func TestRelayMessageShape(t *testing.T) {
	db, rs := setup(t)
	pub := ordered()
	ch, err := pub.Subscribe(context.Background(), topic)
	testkit.Must(t, err)
	ctx := events.WithMetadata(context.Background(), events.Metadata{"tenant": "t1"})
	testkit.Must(t, outboxhook.Add(db.WithContext(ctx), Pinged{N: 1}))
	start(t, rs.new(t, pub))
	select {
	case m := <-ch:
		m.Ack()
		env, err := events.ParseEnvelope(m.UUID, m.Metadata, m.Payload)
		testkit.Must(t, err)
		if env.ID.String() != m.UUID || env.Type != "ping" || env.Version != 1 || env.OccurredAt.IsZero() ||
			env.Metadata["tenant"] != "t1" || string(env.Payload) != `{"N":1}` {
			t.Fatalf("message %s %v %s", m.UUID, m.Metadata, m.Payload)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("nothing published")
	}
}

// failAfter publishes the first n messages to pub and fails every later one.
type failAfter struct {
	pub  message.Publisher
	n    int64
	seen atomic.Int64
}

func (f *failAfter) Publish(topic string, msgs ...*message.Message) error {
	if f.seen.Add(1) > f.n {
		return errors.New("broker down")
	}
	return f.pub.Publish(topic, msgs...)
}

func (f *failAfter) Close() error { return nil }

// A relay stopped while its publisher fails confirms only what was
// published: the next relay publishes the rest, and nothing is lost. One
// event per call (BatchSize 1), so that the publisher's n calls are n
// events; TestBatchRestartRedelivers is the batched case.
func TestRelayRestartPublishesUnconfirmed(t *testing.T) {
	db, rs := setup(t)
	pub := ordered()
	ch, err := pub.Subscribe(context.Background(), topic)
	testkit.Must(t, err)
	write(t, db, 0, 10)
	flaky := &failAfter{pub: pub, n: 4}
	stop := start(t, newRelayBatch(t, rs.dsn, rs.slot, flaky, 1))
	equal(t, receive(t, ch, 4), payloads(0, 4))
	for flaky.seen.Load() < 6 { // failing, retried
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	write(t, db, 10, 12)
	start(t, rs.new(t, pub))
	equal(t, receive(t, ch, 8), payloads(4, 12))
}

// Setup says what the server or the role lacks.
func TestSetupChecks(t *testing.T) {
	t.Parallel()
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	var level string
	testkit.Must(t, pgtest.Admin(t).QueryRow(`SHOW wal_level`).Scan(&level))
	if level != "logical" {
		r := newRelay(t, pgtest.DSN(), "herald", pub)
		if err := r.Setup(context.Background()); !errors.Is(err, walrelay.ErrWALLevel) {
			t.Errorf("Setup on wal_level=%s = %v, want ErrWALLevel", level, err)
		}
		if err := r.Run(context.Background()); !errors.Is(err, walrelay.ErrWALLevel) {
			t.Errorf("Run on wal_level=%s = %v, want ErrWALLevel", level, err)
		}
	}
	db, dsn := logicaltest.Open(t, nil)
	role := pgtest.Name("norepl_")
	testkit.Must(t, db.Exec(`CREATE ROLE `+role+` LOGIN`).Error)
	t.Cleanup(func() { _ = db.Exec(`DROP ROLE ` + role).Error })
	u, err := url.Parse(dsn)
	testkit.Must(t, err)
	u.User = url.User(role)
	if err := newRelay(t, u.String(), logicaltest.SlotName(), pub).Setup(context.Background()); !errors.Is(err, walrelay.ErrReplicationRight) {
		t.Errorf("Setup as a role without REPLICATION = %v, want ErrReplicationRight", err)
	}
	slot := logicaltest.TestDecodingSlot(t, db)
	if err := newRelay(t, dsn, slot, pub).Setup(context.Background()); !errors.Is(err, walrelay.ErrSlot) {
		t.Errorf("Setup on a test_decoding slot = %v, want ErrSlot", err)
	}
	for _, bad := range []walrelay.Config{{Slot: "Bad-Name"}, {Publication: "x;y"}, {PublishTimeout: -1}, {BatchSize: -1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", bad)
		}
	}
}

// A transaction published in part when the relay stops is published again
// whole: its commit was never confirmed (at least once). One event per call
// (BatchSize 1), to stop in the middle of the transaction.
func TestRelayRestartMidTransaction(t *testing.T) {
	db, rs := setup(t)
	pub := ordered()
	ch, err := pub.Subscribe(context.Background(), topic)
	testkit.Must(t, err)
	testkit.Must(t, db.Transaction(func(tx *gorm.DB) error {
		return outboxhook.Add(tx, Pinged{N: 0}, Pinged{N: 1}, Pinged{N: 2})
	}))
	flaky := &failAfter{pub: pub, n: 2}
	stop := start(t, newRelayBatch(t, rs.dsn, rs.slot, flaky, 1))
	equal(t, receive(t, ch, 2), payloads(0, 2))
	stop()
	start(t, rs.new(t, pub))
	equal(t, receive(t, ch, 3), payloads(0, 3))
}

// With no Herald event in flight the relay confirms what the server sent,
// so writes that are not Herald's do not make the slot hold WAL back.
func TestRelayConfirmsIdleWAL(t *testing.T) {
	db, rs := setup(t)
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	start(t, rs.new(t, pub))
	testkit.Must(t, db.Exec(`CREATE TABLE other (n int)`).Error)
	testkit.Must(t, db.Exec(`INSERT INTO other SELECT generate_series(1, 1000)`).Error)
	waitConfirmed(t, db, rs.slot)
}

// waitConfirmed waits until the slot confirmed the WAL written so far.
func waitConfirmed(t *testing.T, db *gorm.DB, slot string) {
	t.Helper()
	var end string
	testkit.Must(t, db.Raw(`SELECT pg_current_wal_lsn()::text`).Scan(&end).Error)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var caught bool
		testkit.Must(t, db.Raw(`SELECT confirmed_flush_lsn >= ?::pg_lsn FROM pg_replication_slots WHERE slot_name = ?`,
			end, slot).Scan(&caught).Error)
		if caught {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s did not confirm past %s", slot, end)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A lost replication connection (its walsender ended) is reconnected, and
// nothing is lost.
func TestRelayReconnects(t *testing.T) {
	db, rs := setup(t)
	pub := ordered()
	ch, err := pub.Subscribe(context.Background(), topic)
	testkit.Must(t, err)
	start(t, rs.new(t, pub))
	write(t, db, 0, 3)
	equal(t, receive(t, ch, 3), payloads(0, 3))
	waitConfirmed(t, db, rs.slot) // else the new connection publishes them again (at least once)
	var ended int
	testkit.Must(t, db.Raw(`SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots
WHERE slot_name = ? AND active_pid IS NOT NULL`, rs.slot).Scan(&ended).Error)
	if ended != 1 {
		t.Fatalf("ended %d walsenders, want 1", ended)
	}
	write(t, db, 3, 6)
	got := receive(t, ch, 3)
	equal(t, got, payloads(3, 6))
}

// failFor fails every publish until a moment, then publishes to pub.
type failFor struct {
	pub   message.Publisher
	until time.Time
}

func (f *failFor) Publish(topic string, msgs ...*message.Message) error {
	if time.Now().Before(f.until) {
		return errors.New("broker down")
	}
	return f.pub.Publish(topic, msgs...)
}

func (f *failFor) Close() error { return nil }

// While the publisher fails the relay keeps answering the server, so a
// broker outage longer than wal_sender_timeout does not end the stream.
func TestRelayOutageKeepsStream(t *testing.T) {
	db, rs := setup(t)
	pub := ordered()
	ch, err := pub.Subscribe(context.Background(), topic)
	testkit.Must(t, err)
	u, err := url.Parse(rs.dsn)
	testkit.Must(t, err)
	q := u.Query()
	q.Set("wal_sender_timeout", "1000") // ms
	u.RawQuery = q.Encode()
	flaky := &failFor{pub: pub, until: time.Now().Add(3 * time.Second)}
	start(t, newRelay(t, u.String(), rs.slot, flaky))
	walsender := func() (pid int) {
		testkit.Must(t, db.Raw(`SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = ?`, rs.slot).Scan(&pid).Error)
		return pid
	}
	for walsender() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	first := walsender()
	write(t, db, 0, 3)
	got := receive(t, ch, 3)
	slices.Sort(got) // retried after the outage in turns, not in commit order (Config.Ordered keeps an aggregate's)
	equal(t, got, payloads(0, 3))
	if now := walsender(); now != first {
		t.Fatalf("walsender %d replaced by %d during the outage: the stream was ended", first, now)
	}
}

// A database restart ends the stream; the relay reconnects and publishes
// what was written after it, nothing lost. PostgreSQL 15 does not save a
// logical slot's confirmed position at shutdown unless something else made
// the slot dirty (PostgreSQL 17 does), so events confirmed before the
// restart may come again, in order, before the new ones: at least once.
func TestRelayDatabaseRestart(t *testing.T) {
	t.Parallel()
	srv, err := pgtest.StartServer(logicaltest.Settings...)
	if errors.Is(err, pgtest.ErrNoBinaries) {
		t.Skip(err)
	}
	testkit.Must(t, err)
	t.Cleanup(func() { _ = srv.Stop("immediate") })
	db := pgtest.OpenDSN(t, srv.DSN, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{
		Storage: outboxhook.StorageWAL,
		Topic:   func(*events.Envelope) string { return topic },
	})))
	pub := ordered()
	ch, err := pub.Subscribe(context.Background(), topic)
	testkit.Must(t, err)
	slot := logicaltest.SlotName()
	start(t, newRelay(t, srv.DSN, slot, pub))
	for {
		var n int
		testkit.Must(t, db.Raw(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = ?`, slot).Scan(&n).Error)
		if n == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	write(t, db, 0, 3)
	equal(t, receive(t, ch, 3), payloads(0, 3))
	waitConfirmed(t, db, slot)
	testkit.Must(t, srv.Restart())
	sqlDB, err := db.DB()
	testkit.Must(t, err)
	for deadline := time.Now().Add(20 * time.Second); sqlDB.Ping() != nil; { // the pool's connections died
		if time.Now().After(deadline) {
			t.Fatal("database not back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	write(t, db, 3, 6)
	var got []string
	for len(got) < 3 || fmt.Sprint(got[len(got)-3:]) != fmt.Sprint(payloads(3, 6)) {
		select {
		case m := <-ch:
			m.Ack()
			got = append(got, string(m.Payload))
		case <-time.After(20 * time.Second):
			t.Fatalf("after the restart: %v, want 3, 4, 5 at the end", got)
		}
	}
	again := got[:len(got)-3] // a suffix of 0, 1, 2, republished in order
	if fmt.Sprint(again) != fmt.Sprint(payloads(3-len(again), 3)) {
		t.Fatalf("after the restart: %v", got)
	}
	t.Logf("republished after the restart: %d", len(again))
}
