package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/relay"
)

// refusals are the windows in which the relays refuse the last topic. The
// orchestrator announces each in a file ahead of time (announceLead), one line
// per window: its start and end in Unix nanoseconds. A relay re-reads the file
// at most every 50ms, so every relay, restarted or not, knows a window before
// it starts; the windows are wall-clock times of this one machine.
type refusals struct {
	file    string
	mu      sync.Mutex
	read    time.Time
	windows [][2]int64
}

// announceLead is how long before its start a refusal window is announced.
const announceLead = 300 * time.Millisecond

// active reports whether now is in a refusal window.
func (r *refusals) active(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file == "" {
		return false
	}
	if now.Sub(r.read) >= 50*time.Millisecond {
		r.reload()
		r.read = now
	}
	n := now.UnixNano()
	for _, w := range r.windows {
		if n >= w[0] && n < w[1] {
			return true
		}
	}
	return false
}

// reload reads the windows; a line being written is skipped (it is read again
// before its window starts).
func (r *refusals) reload() {
	data, err := os.ReadFile(r.file)
	if err != nil {
		return
	}
	r.windows = r.windows[:0]
	for _, line := range strings.Split(string(data), "\n") {
		var w [2]int64
		if n, err := fmt.Sscanf(line, "%d %d", &w[0], &w[1]); err == nil && n == 2 {
			r.windows = append(r.windows, w)
		}
	}
}

// announce appends a refusal window to file.
func announce(file string, start, end time.Time) error {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("announce refusal: %w", err)
	}
	if _, err := fmt.Fprintf(f, "%d %d\n", start.UnixNano(), end.UnixNano()); err != nil {
		_ = f.Close()
		return fmt.Errorf("announce refusal: %w", err)
	}
	return f.Close()
}

// faults is the orchestrator's fault side: broker outages that begin under a
// burst of events, refusal windows of one topic with light traffic on the
// others, and the schedule of poisoned events. An outage and a refusal window
// never overlap (mu).
type faults struct {
	db  *gorm.DB     // the writers'
	q   *gorm.DB     // the ledger's reads
	mon *relay.Relay // never run: its Stats
	brk broker
	led *ledger
	env env

	outageLen, refuseFor time.Duration
	burstAccounts        int
	burstEvents          int // per account

	mu        sync.Mutex
	slow      atomic.Bool  // writers write slowly (a refusal window: light traffic)
	poisonDue atomic.Int64 // poisoned events the writers still owe
	outages   atomic.Int64
	refusalsN atomic.Int64
	// refusedWaiting sums, over the refusal windows, the events of the
	// refused topic waiting for a retry at the window's end.
	refusedWaiting atomic.Int64
	burstStats     []string  // per outage: the burst's messages streamed and events unmarked at the stop
	bursts         spans     // when the bursts' transactions were open
	outageAt       time.Time // when the first outage's burst began
	fillStat       string    // -fill-stream: what the full streams held back
	filled         bool      // -fill-stream: a stream was full (the fault was felt)
	// sched hands the writers their scheduled events, and cancels and
	// moves them (nil: the writers schedule none).
	sched *scheduler
}

// spans are time intervals, safe for concurrent use.
type spans struct {
	mu sync.Mutex
	s  [][2]time.Time
}

func (s *spans) add(from, to time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.s = append(s.s, [2]time.Time{from, to})
}

// overlaps reports whether [began, ended] overlaps one of the spans.
func (s *spans) overlaps(began, ended time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.s {
		if !began.After(sp[1]) && !ended.Before(sp[0]) {
			return true
		}
	}
	return false
}

// firstOutage is when the first outage's burst began (zero: none yet).
func (f *faults) firstOutage() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outageAt
}

// outage writes a burst of events, waits until the relays are publishing it,
// and stops the broker while their batches are in flight, for outageLen.
func (f *faults) outage() {
	f.mu.Lock()
	defer f.mu.Unlock()
	before := f.streamed()
	if f.outageAt.IsZero() {
		f.outageAt = time.Now()
	}
	ids, err := f.burst()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: burst:", err)
	}
	f.awaitPublishing(before + int64(len(ids)/3))
	var unmarked int64
	if len(ids) > 0 {
		_ = f.q.Raw(`SELECT count(*) FROM outbox_messages WHERE id IN ?
			AND processed_at IS NULL AND dead_at IS NULL`, ids).Row().Scan(&unmarked)
	}
	streamed := f.streamed() - before
	f.brk.Stop()
	stat := fmt.Sprintf("%d streamed, %d of %d unmarked", streamed, unmarked, len(ids))
	f.burstStats = append(f.burstStats, stat)
	fmt.Fprintf(os.Stderr, "chaos: broker down for %v; burst: %s\n", f.outageLen, stat)
	time.Sleep(f.outageLen)
	var failing, maxAttempts int64
	_ = f.q.Raw(`SELECT count(*), coalesce(max(attempts), 0) FROM outbox_messages
		WHERE processed_at IS NULL AND dead_at IS NULL AND attempts > 0`).Row().Scan(&failing, &maxAttempts)
	fmt.Fprintf(os.Stderr, "chaos: broker back; %d events wait for a retry, with up to %d failed attempts\n", failing, maxAttempts)
	if err := f.brk.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: broker restart:", err)
	}
	f.outages.Add(1)
}

// awaitPublishing returns once the streams hold at least n messages and are
// growing (a relay is publishing at this instant, not claiming or marking),
// or after 2s.
func (f *faults) awaitPublishing(n int64) {
	last := f.streamed()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Microsecond)
		now := f.streamed()
		if now >= n && now > last {
			return
		}
		last = now
	}
}

// streamed is how many messages the topics hold (0 when unknown).
func (f *faults) streamed() int64 { return f.brk.Stored(f.env.topics) }

// burst commits burstAccounts new accounts with burstEvents events each, in
// one transaction, and returns the event ids (recorded in the ledger).
func (f *faults) burst() ([]string, error) {
	var ids []string
	accs := make([]*Account, f.burstAccounts)
	for i := range accs {
		a := &Account{ID: uuid.New()}
		for range f.burstEvents {
			a.Version++
			a.Record(Deposited{AccountID: a.ID, Version: a.Version})
		}
		for _, r := range a.Records() {
			ids = append(ids, r.ID.String())
		}
		accs[i] = a
	}
	began := time.Now()
	defer func() { f.bursts.add(began, time.Now()) }()
	err := f.db.Transaction(func(tx *gorm.DB) error {
		for _, a := range accs {
			if err := tx.Create(a).Error; err != nil {
				return err
			}
		}
		return nil
	})
	f.led.record(ids, err, false)
	return ids, err
}

// refuse announces a refusal window of refuseFor, starting announceLead from
// now, and keeps the writers slow while it lasts. It records how many events
// of the refused topic wait for a retry at its end, refused.
func (f *faults) refuse() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	start := time.Now().Add(announceLead)
	if err := announce(f.env.refuseFile, start, start.Add(f.refuseFor)); err != nil {
		return err
	}
	time.Sleep(time.Until(start))
	f.slow.Store(true)
	time.Sleep(f.refuseFor)
	var waiting int64
	_ = f.q.Raw(`SELECT count(*) FROM outbox_messages WHERE topic = ?
		AND processed_at IS NULL AND dead_at IS NULL AND last_error LIKE ?`, f.env.topics[len(f.env.topics)-1], refusedPrefix+"%").Row().Scan(&waiting)
	f.slow.Store(false)
	f.refusalsN.Add(1)
	f.refusedWaiting.Add(waiting)
	return nil
}

// refusalLoop runs a refusal window every `every` until ctx is done.
func (f *faults) refusalLoop(ctx context.Context, every time.Duration) {
	for outbound.Sleep(ctx, every/2+rand.N(every)) {
		if err := f.refuse(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return
		}
	}
}

// poisonLoop makes n poisoned events due at even times before `by`. A poison
// dies of strikes, failures confirmed by other events published after it in
// the same batch, so it needs live traffic and relays that live long enough
// to mark a few batches: before the first outage, with most of the run to go.
func (f *faults) poisonLoop(ctx context.Context, n int, by time.Duration) {
	for range n {
		if !outbound.Sleep(ctx, by/time.Duration(n+1)) {
			return
		}
		f.poisonDue.Add(1)
	}
}

// takePoison reports whether the caller should write a poisoned event now.
func (f *faults) takePoison() bool {
	for {
		n := f.poisonDue.Load()
		if n <= 0 {
			return false
		}
		if f.poisonDue.CompareAndSwap(n, n-1) {
			return true
		}
	}
}
