package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/walrelay"
)

// exitSlotLost is a relay process's exit code when its walrelay stopped with
// walrelay.ErrSlot (-drop-slot): its supervisor does not restart it until the
// operator started afresh.
const exitSlotLost = 3

// slotFault is -drop-slot: the WAL relays' slot dropped once, by hand, as an
// operator's mistake or a failover would lose it. Every relay process must
// stop with walrelay.ErrSlot, none may make the slot again; then the
// orchestrator, as the operator, starts afresh (walrelay.RecreateSlot) and
// the relays run again. The events committed between the lost slot's last
// confirmed position and the new slot's start are at risk: a WAL event has
// no row anywhere, and no slot kept its WAL.
type slotFault struct {
	q       *gorm.DB // the ledger's handle (a superuser of the run's own server)
	dsn     string   // the relays'
	ordered bool

	hold       atomic.Bool  // relays that stopped with ErrSlot wait while set
	held       atomic.Int64 // relay processes stopped with ErrSlot, waiting now
	stops      atomic.Int64 // relay exits with ErrSlot while the slot was lost
	unexpected atomic.Int64 // relay exits with ErrSlot at other times
	remade     bool         // a slot of that name existed again before the operator made it
	stopped    int64        // relay processes stopped with ErrSlot when the operator made it
	relays     int64        // relay processes of the run
	dropErr    error
	rec        walrelay.Recreated
	recErr     error

	droppedAt, recreatedAt time.Time
	waited                 time.Duration // from the drop to the operator's start afresh

	mu      sync.Mutex
	samples []lsnSample // the WAL's insert position over time, until the new slot
}

type lsnSample struct {
	at  time.Time
	lsn uint64
}

// exited is called by a relay's supervisor after its process ended; it
// returns once the relay may start again.
func (s *slotFault) exited(cmd *exec.Cmd, stopping *atomic.Bool) {
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitSlotLost {
		return
	}
	if !s.hold.Load() {
		s.unexpected.Add(1)
		return
	}
	s.stops.Add(1)
	s.held.Add(1)
	defer s.held.Add(-1)
	for s.hold.Load() && !stopping.Load() {
		time.Sleep(50 * time.Millisecond)
	}
}

// sample records the WAL's insert position every 10ms until ctx is done or
// the new slot is made (and 3s more).
func (s *slotFault) sample(ctx context.Context) {
	for ctx.Err() == nil {
		var txt string
		if s.q.WithContext(ctx).Raw(`SELECT pg_current_wal_insert_lsn()::text`).Row().Scan(&txt) == nil {
			if lsn, ok := parseLSN(txt); ok {
				s.mu.Lock()
				s.samples = append(s.samples, lsnSample{time.Now(), lsn})
				s.mu.Unlock()
			}
		}
		s.mu.Lock()
		done := !s.recreatedAt.IsZero() && time.Since(s.recreatedAt) > 3*time.Second
		s.mu.Unlock()
		if done || !outbound.Sleep(ctx, 10*time.Millisecond) {
			return
		}
	}
}

// run drops the slot, waits for the relays (relays processes) to stop with
// ErrSlot (at most 10s), checks none made it again, and starts afresh.
func (s *slotFault) run(ctx context.Context, relays int) {
	s.hold.Store(true)
	defer s.hold.Store(false)
	for try := 0; ; try++ {
		// The streaming relay's session first: an active slot cannot be
		// dropped. Its relay may connect again in between: again.
		_ = s.q.Exec(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = ? AND active_pid IS NOT NULL`, walConfig(s.ordered).Slot).Error
		err := s.q.Exec(`SELECT pg_drop_replication_slot(?)`, walConfig(s.ordered).Slot).Error
		if err == nil {
			break
		}
		if try == 100 {
			s.dropErr = err
			fmt.Fprintln(os.Stderr, "chaos: drop the slot:", err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.droppedAt = time.Now()
	fmt.Fprintln(os.Stderr, "chaos: replication slot dropped")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && s.held.Load() < int64(relays); {
		time.Sleep(50 * time.Millisecond)
	}
	var n int64
	_ = s.q.Raw(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = ?`, walConfig(s.ordered).Slot).Row().Scan(&n)
	s.remade = n > 0
	s.stopped, s.relays = s.held.Load(), int64(relays)
	s.waited = time.Since(s.droppedAt)
	rec, err := walrelay.RecreateSlot(ctx, s.dsn, walConfig(s.ordered))
	s.mu.Lock()
	s.rec, s.recErr, s.recreatedAt = rec, err, time.Now()
	s.mu.Unlock()
	fmt.Fprintf(os.Stderr, "chaos: the operator started afresh after %v (%d relays stopped with ErrSlot): %+v %v\n",
		s.waited.Round(time.Millisecond), s.held.Load(), rec, err)
}

// atRiskMargin is how long after the WAL passed the new slot's start a
// transaction may still return from its commit: a commit returning later
// was written after the new slot's start.
const atRiskMargin = 2 * time.Second

// window is the span of commit times (as the writers saw them return) of the
// events that may have been committed between the lost slot's last confirmed
// position and the new slot's start: after the WAL passed the first (the
// run's start when unknown), before it passed the second (and a margin).
func (s *slotFault) window(runStart time.Time) (from, to time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recErr != nil || s.recreatedAt.IsZero() {
		return from, to, false
	}
	first, ok1 := parseLSN(s.rec.LastConfirmed)
	last, ok2 := parseLSN(s.rec.Start)
	if !ok2 {
		return from, to, false
	}
	from, to = runStart, s.recreatedAt
	for _, sm := range s.samples {
		if ok1 && sm.lsn <= first {
			from = sm.at // the WAL had not passed it yet
		}
		if sm.lsn >= last && sm.at.Before(to) {
			to = sm.at
			break
		}
	}
	return from, to.Add(atRiskMargin), true
}

// markAtRisk books, in the ledger, the committed events at risk: those whose
// transactions returned within the window.
func (s *slotFault) markAtRisk(led *ledger, runStart time.Time) (from, to time.Time) {
	from, to, ok := s.window(runStart)
	led.mu.Lock()
	defer led.mu.Unlock()
	led.atRisk = map[string]struct{}{}
	if !ok {
		return from, to
	}
	for id, at := range led.committed {
		if at.After(from) && !at.After(to) {
			led.atRisk[id] = struct{}{}
		}
	}
	return from, to
}

// ok reports whether the relays behaved: every relay process stopped with
// ErrSlot (the one streaming and those waiting to take over), none at
// another time, none made the slot again, and
// the operator's start afresh worked.
func (s *slotFault) ok() bool {
	return s.dropErr == nil && s.stopped == s.relays && s.unexpected.Load() == 0 && !s.remade && s.recErr == nil && s.rec.Created && s.rec.Lost
}

// parseLSN reads a pg_lsn's text, "16/B374D848".
func parseLSN(s string) (uint64, bool) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, false
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return h<<32 | l, true
}

// unappliedAtRisk is how many events at risk have no effect (yet): counted
// as applied while the run waits for the others to drain (0 without -drop-slot).
func unappliedAtRisk(q *gorm.DB, led *ledger) int64 {
	led.mu.Lock()
	ids := make([]string, 0, len(led.atRisk))
	for id := range led.atRisk {
		if _, p := led.poisoned[id]; !p {
			ids = append(ids, id)
		}
	}
	led.mu.Unlock()
	if len(ids) == 0 {
		return 0
	}
	var applied int64
	if err := q.Raw(`SELECT count(DISTINCT event_id) FROM effects WHERE event_id IN ?`, ids).Row().Scan(&applied); err != nil {
		return 0
	}
	return int64(len(ids)) - applied
}

// rows prints the slot fault's rows of the table.
func (s *slotFault) rows(row func(string, any), v verdict, start, from, to time.Time) {
	relays := fmt.Sprintf("%d of %d relay processes stopped when the operator came (%d exits with ErrSlot while it was lost, %d at other times: must be 0); a relay made it again: %v; dropped at %.1fs",
		s.stopped, s.relays, s.stops.Load(), s.unexpected.Load(), s.remade, s.droppedAt.Sub(start).Seconds())
	if s.dropErr != nil {
		relays = "not dropped: " + s.dropErr.Error()
	}
	row("replication slot dropped once (-drop-slot): the relays must stop with walrelay.ErrSlot", relays)
	op := fmt.Sprintf("after %v: walrelay.RecreateSlot: lost slot's last confirmed position %q, new slot's start %s", s.waited.Round(time.Millisecond), s.rec.LastConfirmed, s.rec.Start)
	if s.recErr != nil {
		op = "walrelay.RecreateSlot failed: " + s.recErr.Error()
	}
	row("the operator's start afresh", op)
	row("events at risk (committed between those positions: returned from commit "+
		fmt.Sprintf("%.1fs..%.1fs", from.Sub(start).Seconds(), to.Sub(start).Seconds())+"), delivered, lost (allowed only among these: a WAL event has no row, its slot gone it is gone)",
		fmt.Sprintf("%d, %d, %d", v.atRisk, v.atRisk-v.lostAtRisk, v.lostAtRisk))
}
