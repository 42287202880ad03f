package walrelay_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/walrelay"
)

// lostCfg is the configuration of the relays of these tests: a retry
// interval long enough to drop the slot between two connections.
func lostCfg(slot string) walrelay.Config {
	return walrelay.Config{Slot: slot, Logger: testkit.Quiet(), RetryInterval: 500 * time.Millisecond,
		StatusInterval: 50 * time.Millisecond}
}

// slotExists reports whether the slot exists.
func slotExists(t *testing.T, db *gorm.DB, slot string) bool {
	t.Helper()
	var n int64
	testkit.Must(t, db.Raw(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = ?`, slot).Scan(&n).Error)
	return n > 0
}

// dropSlot ends the walsender streaming slot, if any, and drops the slot,
// before the relay connects again.
func dropSlot(t *testing.T, db *gorm.DB, slot string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the slot to be dropped", func() bool {
		testkit.Must(t, db.Exec(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
WHERE slot_name = ? AND active_pid IS NOT NULL`, slot).Error)
		testkit.Must(t, db.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
WHERE slot_name = ? AND NOT active`, slot).Error)
		return !slotExists(t, db, slot)
	})
}

// walEnd is the server's current WAL position.
func walEnd(t *testing.T, db *gorm.DB) pglogrepl.LSN {
	t.Helper()
	var s string
	testkit.Must(t, db.Raw(`SELECT pg_current_wal_lsn()::text`).Scan(&s).Error)
	lsn, err := pglogrepl.ParseLSN(s)
	testkit.Must(t, err)
	return lsn
}

// checkLost checks that err is a SlotLostError of slot wrapping ErrSlot,
// whose last confirmed position is known and not after before (the WAL's
// end before the event that was committed while the slot was gone).
func checkLost(t *testing.T, err error, slot string, before pglogrepl.LSN) *walrelay.SlotLostError {
	t.Helper()
	var lost *walrelay.SlotLostError
	if !errors.Is(err, walrelay.ErrSlot) || !errors.As(err, &lost) {
		t.Fatalf("error = %v, want a SlotLostError wrapping ErrSlot", err)
	}
	last, perr := pglogrepl.ParseLSN(lost.LastConfirmed)
	if lost.Slot != slot || perr != nil || last == 0 || last > before {
		t.Fatalf("SlotLostError %+v: want slot %s, a last confirmed position at or before %s", lost, slot, before)
	}
	for _, want := range []string{"is gone", "events committed after " + lost.LastConfirmed, "herald wal recreate --slot " + slot,
		"RecreateLostSlot"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error lacks %q: %v", want, err)
		}
	}
	return lost
}

// runUntilError runs r and returns Run's error, failing the test if Run
// goes on (it made the slot again) for longer than a while.
func runUntilError(t *testing.T, r *walrelay.Relay, db *gorm.DB, slot string, during func()) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	if during != nil {
		during()
	}
	select {
	case err := <-done:
		return err
	case <-time.After(15 * time.Second):
		exists := slotExists(t, db, slot)
		cancel()
		stopped := <-done
		t.Fatalf("Run goes on after its slot was dropped (the slot exists again: %v; cancelled, it returned %v)", exists, stopped)
		return nil
	}
}

// A slot dropped between two connections of one Run (its walsender ended,
// the slot dropped, an event committed meanwhile): Run stops with ErrSlot,
// saying from which position events may be lost, and does not make the
// slot again. Also with its row in herald_wal_slots deleted: the Run that
// streamed the slot knows it existed.
func TestLostSlotStopsRun(t *testing.T) {
	t.Parallel()
	for _, forget := range []bool{false, true} {
		name := "row kept"
		if forget {
			name = "row deleted"
		}
		t.Run(name, func(t *testing.T) {
			db, rs := setup(t)
			pub := ordered()
			ch, err := pub.Subscribe(context.Background(), topic)
			testkit.Must(t, err)
			r, err := walrelay.New(rs.dsn, pub, lostCfg(rs.slot))
			testkit.Must(t, err)
			var before pglogrepl.LSN
			err = runUntilError(t, r, db, rs.slot, func() {
				write(t, db, 0, 1)
				equal(t, receive(t, ch, 1), payloads(0, 1))
				if forget {
					testkit.Must(t, db.Exec(`DELETE FROM `+walrelay.SlotMarkerTable).Error)
				}
				dropSlot(t, db, rs.slot)
				before = walEnd(t, db)
				write(t, db, 1, 2) // in no slot
			})
			lost := checkLost(t, err, rs.slot, before)
			if !lost.Seen.IsZero() {
				t.Errorf("Seen %v: the position is the Run's own", lost.Seen)
			}
			if slotExists(t, db, rs.slot) {
				t.Fatal("Run made the slot again")
			}
			select {
			case m := <-ch:
				t.Fatalf("published %s", m.Payload)
			default:
			}
		})
	}
}

// A new Run (another process) on a slot that vanished since the last one:
// the slot's row says it existed, so Run and Setup (herald wal setup) stop
// with ErrSlot and make nothing; so does a slot set up and dropped before
// any relay streamed it (events written after Setup were its).
func TestLostSlotStopsNewRun(t *testing.T) {
	db, rs := setup(t)
	pub := ordered()
	ch, err := pub.Subscribe(context.Background(), topic)
	testkit.Must(t, err)
	stop := start(t, rs.new(t, pub))
	write(t, db, 0, 2)
	equal(t, receive(t, ch, 2), payloads(0, 2))
	stop()
	dropSlot(t, db, rs.slot)
	before := walEnd(t, db)
	write(t, db, 2, 3)

	r, err := walrelay.New(rs.dsn, pub, lostCfg(rs.slot))
	testkit.Must(t, err)
	lost := checkLost(t, runUntilError(t, r, db, rs.slot, nil), rs.slot, before)
	if lost.Seen.IsZero() {
		t.Errorf("SlotLostError %+v: no time of the row", lost)
	}
	_ = checkLost(t, walrelay.Setup(context.Background(), rs.dsn, lostCfg(rs.slot)), rs.slot, before)
	if slotExists(t, db, rs.slot) {
		t.Fatal("the slot was made again")
	}

	t.Run("set up, never streamed", func(t *testing.T) {
		db, rs := setup(t)
		dropSlot(t, db, rs.slot)
		r, err := walrelay.New(rs.dsn, pub, lostCfg(rs.slot))
		testkit.Must(t, err)
		_ = checkLost(t, runUntilError(t, r, db, rs.slot, nil), rs.slot, walEnd(t, db))
		if slotExists(t, db, rs.slot) {
			t.Fatal("the slot set up and dropped was made again")
		}
	})
}

// syncBuffer is a bytes.Buffer for a logger written from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The operator's start afresh: RecreateSlot (herald wal recreate) makes the
// lost slot again and says between which positions events may be lost; a
// relay then streams it, publishing what comes after. Config.RecreateLostSlot
// does the same in Run, logging the positions at Error. Drop (herald wal
// drop) forgets the slot: set up again, it is a first start.
func TestRecreateLostSlot(t *testing.T) {
	db, rs := setup(t)
	pub := ordered()
	ch, err := pub.Subscribe(context.Background(), topic)
	testkit.Must(t, err)
	stop := start(t, rs.new(t, pub))
	write(t, db, 0, 1)
	equal(t, receive(t, ch, 1), payloads(0, 1))
	stop()
	dropSlot(t, db, rs.slot)
	write(t, db, 1, 2) // lost

	ctx := context.Background()
	rec, err := walrelay.RecreateSlot(ctx, rs.dsn, lostCfg(rs.slot))
	testkit.Must(t, err)
	last, err1 := pglogrepl.ParseLSN(rec.LastConfirmed)
	st, err2 := pglogrepl.ParseLSN(rec.Start)
	if !rec.Created || !rec.Lost || rec.Invalidated || err1 != nil || err2 != nil || last == 0 || st <= last || rec.Slot != rs.slot {
		t.Fatalf("RecreateSlot = %+v", rec)
	}
	if rec, err := walrelay.RecreateSlot(ctx, rs.dsn, lostCfg(rs.slot)); err != nil || rec.Created || rec.Lost {
		t.Fatalf("RecreateSlot of a slot that exists = %+v, %v; want nothing done", rec, err)
	}
	stop = start(t, rs.new(t, pub))
	write(t, db, 2, 4)
	equal(t, receive(t, ch, 2), payloads(2, 4))
	stop()

	// Config.RecreateLostSlot, in Run.
	dropSlot(t, db, rs.slot)
	write(t, db, 4, 5) // lost
	var logs syncBuffer
	cfg := lostCfg(rs.slot)
	cfg.RecreateLostSlot = true
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))
	r, err := walrelay.New(rs.dsn, pub, cfg)
	testkit.Must(t, err)
	stop = start(t, r)
	// Streamed by a walsender: made (a slot being made is listed, active
	// for the backend making it, before its start is known, while the
	// server waits for the transactions running then).
	testkit.Eventually(t, 20*time.Second, "the slot to be made again and streamed", func() bool {
		var n int64
		testkit.Must(t, db.Raw(`SELECT count(*) FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_name = ?`, rs.slot).Scan(&n).Error)
		return n > 0
	})
	write(t, db, 5, 6)
	equal(t, receive(t, ch, 1), payloads(5, 6))
	stop()
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "lost slot made again") ||
		!strings.Contains(out, "may never be published") || !strings.Contains(out, "new_start=") {
		t.Fatalf("logs of RecreateLostSlot:\n%s", out)
	}

	// Dropped on purpose: set up again without a word.
	sqlDB, err := sql.Open("pgx", rs.dsn)
	testkit.Must(t, err)
	defer func() { _ = sqlDB.Close() }()
	testkit.Eventually(t, 10*time.Second, "Drop", func() bool {
		_, err := walrelay.Drop(ctx, sqlDB, lostCfg(rs.slot))
		if errors.Is(err, walrelay.ErrSlotActive) {
			return false
		}
		testkit.Must(t, err)
		return true
	})
	testkit.Must(t, walrelay.Setup(ctx, rs.dsn, lostCfg(rs.slot)))
	if !slotExists(t, db, rs.slot) {
		t.Fatal("Setup after Drop made no slot")
	}
}
