package walrelay_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/walrelay"
)

// Blob is an event with a large payload, to make WAL.
type Blob struct{ Data string }

func (Blob) EventType() string { return "blob" }

// slotEnv is a database of the logical server in StorageWAL, and a slot name
// of its own, made by Setup.
type slotEnv struct {
	db   *gorm.DB
	sql  *sql.DB
	dsn  string
	slot string
	made int64 // the server's WAL position (bytes) just before the slot was made
}

func newSlotEnv(t *testing.T) *slotEnv {
	t.Helper()
	db, dsn := logicaltest.Open(t, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{
		Storage: outboxhook.StorageWAL,
		Topic:   func(*events.Envelope) string { return topic },
	})))
	s, err := db.DB()
	testkit.Must(t, err)
	e := &slotEnv{db: db, sql: s, dsn: dsn, slot: logicaltest.SlotName()}
	e.made = e.walPosition(t)
	testkit.Must(t, walrelay.Setup(context.Background(), dsn, walrelay.Config{Slot: e.slot, Logger: testkit.Quiet()}))
	return e
}

// walPosition is the server's current WAL position, in bytes.
func (e *slotEnv) walPosition(t *testing.T) int64 {
	t.Helper()
	var n int64
	testkit.Must(t, e.sql.QueryRowContext(context.Background(), `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&n))
	return n
}

func (e *slotEnv) read(t *testing.T) walrelay.SlotStatus {
	t.Helper()
	s, err := walrelay.ReadSlot(context.Background(), e.sql, e.slot)
	testkit.Must(t, err)
	return s
}

// blobs writes n events of 10 kB each, one transaction each.
func (e *slotEnv) blobs(t *testing.T, n int) {
	t.Helper()
	for range n {
		testkit.Must(t, outboxhook.Add(e.db, Blob{Data: strings.Repeat("x", 10_000)}))
	}
}

// A slot Setup just made exists, usable, not streamed, with next to no lag.
func TestSlotStatsFresh(t *testing.T) {
	t.Parallel()
	e := newSlotEnv(t)
	s := e.read(t)
	if !s.Exists || s.Active || s.ActivePID != 0 || s.Slot != e.slot || s.Plugin != "pgoutput" || s.Database == "" {
		t.Fatalf("fresh slot: %+v", s)
	}
	if s.WALStatus != "reserved" {
		t.Fatalf("wal_status %q, want reserved", s.WALStatus)
	}
	if err := s.Problem(); err != nil {
		t.Fatalf("Problem = %v", err)
	}
	if _, ok := s.Age(); ok || s.AgeSeconds != nil {
		t.Fatalf("an age %v for a slot no relay streams", *s.AgeSeconds)
	}
	if s.SafeWALBytes != nil {
		t.Fatalf("safe_wal_size %d without max_slot_wal_keep_size", *s.SafeWALBytes)
	}
	// Other tests' databases write WAL meanwhile (the figures are the
	// server's): a fresh slot lags by at most what the server wrote since
	// just before it was made (CI's race run once had 5.9 MB in that second).
	since := e.walPosition(t) - e.made
	if s.LagBytes < 0 || s.LagBytes > since || s.RetainedBytes < s.LagBytes {
		t.Fatalf("lag %d, retained %d; the server wrote %d bytes of WAL since just before the slot was made", s.LagBytes, s.RetainedBytes, since)
	}
}

// A slot that does not exist is reported missing, not as an error.
func TestSlotStatsMissing(t *testing.T) {
	t.Parallel()
	e := newSlotEnv(t)
	s, err := walrelay.ReadSlot(context.Background(), e.sql, logicaltest.SlotName())
	testkit.Must(t, err)
	if s.Exists || s.Active || s.LagBytes != 0 {
		t.Fatalf("missing slot: %+v", s)
	}
	if err := s.Problem(); !errors.Is(err, walrelay.ErrSlotMissing) {
		t.Fatalf("Problem = %v, want ErrSlotMissing", err)
	}
	// Another database's slot (slot names are the server's) is unusable.
	other := newSlotEnv(t)
	s, err = walrelay.ReadSlot(context.Background(), other.sql, e.slot)
	testkit.Must(t, err)
	if err := s.Problem(); !errors.Is(err, walrelay.ErrSlot) || !strings.Contains(err.Error(), "decodes database") ||
		s.Database == s.CurrentDatabase {
		t.Fatalf("another database's slot: %+v, Problem = %v", s, err)
	}
}

// The lag grows while no relay reads the slot, by at least what was
// written; a relay that runs reports its age and brings the lag back down;
// stopped, it leaves the slot inactive again.
func TestSlotLagGrowsAndShrinks(t *testing.T) {
	t.Parallel()
	e := newSlotEnv(t)
	before := e.read(t)
	e.blobs(t, 100) // 1 MB of payload
	grown := e.read(t)
	if grown.LagBytes < before.LagBytes+1_000_000 || grown.RetainedBytes < grown.LagBytes {
		t.Fatalf("after 1 MB of events the lag went from %d to %d (retained %d)", before.LagBytes, grown.LagBytes, grown.RetainedBytes)
	}

	var published atomic.Int64
	pub := testkit.PublisherFunc(func(_ string, msgs ...*message.Message) error { published.Add(int64(len(msgs))); return nil })
	r, err := walrelay.New(e.dsn, pub, walrelay.Config{
		Slot: e.slot, Logger: testkit.Quiet(), RetryInterval: 20 * time.Millisecond, StatusInterval: 50 * time.Millisecond,
	})
	testkit.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = r.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	t.Cleanup(stop)

	var last walrelay.SlotStatus
	testkit.Eventually(t, 20*time.Second, "the relay to catch up", func() bool {
		s, err := r.Stats(context.Background())
		testkit.Must(t, err)
		last = s
		return published.Load() >= 100 && s.Active && s.LagBytes < grown.LagBytes/2
	})
	age, ok := last.Age()
	if !ok || age < 0 || age > 5*time.Second || last.ActivePID == 0 {
		t.Fatalf("a streamed slot: age %v (known %v), pid %d", age, ok, last.ActivePID)
	}
	stop()
	testkit.Eventually(t, 10*time.Second, "the slot to be inactive", func() bool {
		s := e.read(t)
		return !s.Active && s.AgeSeconds == nil && s.Exists
	})
}

// A slot the server invalidated (max_slot_wal_keep_size) is reported as
// such. Not parallel: the setting is the server's, and would invalidate the
// other tests' slots; parallel tests wait until it is reset.
func TestSlotStatsInvalidated(t *testing.T) {
	e := newSlotEnv(t)
	set := func(v string) {
		testkit.Must(t, e.db.Exec(`ALTER SYSTEM SET max_slot_wal_keep_size = `+v).Error)
		testkit.Must(t, e.db.Exec(`SELECT pg_reload_conf()`).Error)
		want := v + "MB"
		if v == "-1" {
			want = v
		}
		testkit.Eventually(t, 10*time.Second, "max_slot_wal_keep_size "+want, func() bool {
			var got string
			testkit.Must(t, e.db.Raw(`SELECT current_setting('max_slot_wal_keep_size')`).Scan(&got).Error)
			return got == want
		})
		time.Sleep(200 * time.Millisecond) // the checkpointer reloads too
	}
	set("1")
	t.Cleanup(func() { set("-1") })

	if s := e.read(t); s.SafeWALBytes == nil {
		t.Fatalf("no safe_wal_size with max_slot_wal_keep_size set: %+v", s)
	}
	testkit.Eventually(t, 30*time.Second, "the slot to be invalidated", func() bool {
		e.blobs(t, 10)
		testkit.Must(t, e.db.Exec(`SELECT pg_switch_wal()`).Error)
		testkit.Must(t, e.db.Exec(`CHECKPOINT`).Error)
		return e.read(t).WALStatus == "lost"
	})
	s := e.read(t)
	if err := s.Problem(); !errors.Is(err, walrelay.ErrSlot) || !strings.Contains(err.Error(), "invalidated") {
		t.Fatalf("Problem of a lost slot = %v", err)
	}
	if !s.Exists || s.Active {
		t.Fatalf("lost slot: %+v", s)
	}
	// Setup (and so Run) stops on it; RecreateSlot, the operator's start
	// afresh, drops it and makes a new one, saying what may be lost.
	cfg := walrelay.Config{Slot: e.slot, Logger: testkit.Quiet()}
	var lost *walrelay.SlotLostError
	if err := walrelay.Setup(context.Background(), e.dsn, cfg); !errors.As(err, &lost) || !lost.Invalidated ||
		!errors.Is(err, walrelay.ErrSlot) || !strings.Contains(err.Error(), "herald wal recreate") {
		t.Fatalf("Setup on an invalidated slot = %v", err)
	}
	rec, err := walrelay.RecreateSlot(context.Background(), e.dsn, cfg)
	testkit.Must(t, err)
	if !rec.Created || !rec.Lost || !rec.Invalidated || rec.LastConfirmed == "" || rec.Start == "" {
		t.Fatalf("RecreateSlot of an invalidated slot = %+v", rec)
	}
	if s := e.read(t); !s.Exists || s.WALStatus == "lost" {
		t.Fatalf("the slot made again: %+v", s)
	}
}

// Drop removes the slot and the publication, refuses a slot in use, and
// drops nothing the second time.
func TestDrop(t *testing.T) {
	t.Parallel()
	e := newSlotEnv(t)
	cfg := walrelay.Config{Slot: e.slot, Publication: "herald"}
	// In use: the slot stays.
	r, err := walrelay.New(e.dsn, testkit.PublisherFunc(func(string, ...*message.Message) error { return nil }),
		walrelay.Config{Slot: e.slot, Logger: testkit.Quiet(), StatusInterval: 50 * time.Millisecond})
	testkit.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	testkit.Eventually(t, 20*time.Second, "the slot to be streamed", func() bool { return e.read(t).Active })
	if _, err := walrelay.Drop(context.Background(), e.sql, cfg); !errors.Is(err, walrelay.ErrSlotActive) {
		t.Fatalf("Drop of a slot in use = %v, want ErrSlotActive", err)
	}
	cancel()
	<-done
	testkit.Eventually(t, 10*time.Second, "the slot to be inactive", func() bool { return !e.read(t).Active })

	d, err := walrelay.Drop(context.Background(), e.sql, cfg)
	testkit.Must(t, err)
	if !d.Slot || !d.Publication {
		t.Fatalf("Drop = %+v, want both dropped", d)
	}
	if s := e.read(t); s.Exists {
		t.Fatalf("the slot is still there: %+v", s)
	}
	d, err = walrelay.Drop(context.Background(), e.sql, cfg)
	testkit.Must(t, err)
	if d.Slot || d.Publication {
		t.Fatalf("second Drop = %+v, want nothing dropped", d)
	}
}
