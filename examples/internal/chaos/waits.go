package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// On PostgreSQL and MySQL a slow save is told apart by sampling: every 100ms
// the host reads which of the writers' sessions wait, on what, and who holds
// it (PostgreSQL: pg_blocking_pids; MySQL: the processlist and InnoDB's lock
// waits), and the machine's load; the slow saves' report names what was seen
// during them.

// dbWait is one sample: the writers' lock waits seen then, and the load.
type dbWait struct {
	at    time.Time
	waits []string // "wait event <- blocker (its state: its query)"
	load  float64  // 1-minute load average
}

// dbWaits are the samples of a run.
type dbWaits struct {
	mu sync.Mutex
	s  []dbWait
}

const pgWaitQuery = `SELECT a.wait_event_type || ':' || coalesce(a.wait_event, '') || ' <- ' ||
  coalesce((SELECT string_agg(b.application_name || ' (' || coalesce(b.state, '') || ': ' || left(coalesce(b.query, ''), 60) || ')', '; ')
            FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(a.pid))), 'nobody')
FROM pg_stat_activity a WHERE a.application_name = 'chaos_writer' AND a.wait_event_type = 'Lock'`

// mysqlWaitQuery lists the orchestrator's sessions (the writers', whose user
// the relays and consumers do not share) that have run one statement, or sat
// idle inside a transaction, for 100ms or more: what they do, and the InnoDB
// transactions that hold the row locks they wait for.
const mysqlWaitQuery = `SELECT CONCAT(IF(p.COMMAND = 'Sleep', 'idle in transaction', COALESCE(p.STATE, p.COMMAND)),
  ' (', LEFT(COALESCE(p.INFO, ''), 40), ') <- ',
  COALESCE((SELECT GROUP_CONCAT(CONCAT(COALESCE(bp.USER, '?'), ' #', bt.trx_mysql_thread_id, ' (',
                   COALESCE(bp.COMMAND, ''), ' ', COALESCE(bp.STATE, ''), ': ', LEFT(COALESCE(bt.trx_query, bp.INFO, ''), 60), ')') SEPARATOR '; ')
            FROM information_schema.INNODB_LOCK_WAITS w
            JOIN information_schema.INNODB_TRX bt ON bt.trx_id = w.blocking_trx_id
            LEFT JOIN information_schema.PROCESSLIST bp ON bp.ID = bt.trx_mysql_thread_id
            WHERE w.requesting_trx_id = t.trx_id), 'no row lock'))
FROM information_schema.PROCESSLIST p
LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID
WHERE p.USER = SUBSTRING_INDEX(CURRENT_USER(), '@', 1) AND p.DB = DATABASE() AND p.ID <> CONNECTION_ID()
  AND p.TIME_MS >= 100 AND (p.COMMAND <> 'Sleep' OR t.trx_id IS NOT NULL)`

// waitLoop samples until ctx ends (PostgreSQL and MySQL).
func (h *host) waitLoop(ctx context.Context) {
	query := map[string]string{postgresDB: pgWaitQuery, mysqlDB: mysqlWaitQuery}[h.kind]
	if query == "" {
		return
	}
	pool, _ := h.db.DB()
	var poolWaits int64
	// A timer set after each sample, not a ticker: a tick that fired while
	// the last sample's query ran would look late.
	const every = 100 * time.Millisecond
	t := time.NewTimer(every)
	defer t.Stop()
	for due := time.Now().Add(every); ; due = time.Now().Add(every) {
		t.Reset(every)
		select {
		case <-ctx.Done():
			return
		case at := <-t.C:
			var waits []string
			// This process's own share: woken late (its goroutines were
			// not run), writers waiting for a connection of their pool.
			if time.Since(due) >= 50*time.Millisecond {
				waits = append(waits, "the writers' process ran late (>=50ms)")
			}
			if pool != nil {
				if n := pool.Stats().WaitCount; n > poolWaits {
					waits = append(waits, "a writer waited for a pooled connection")
					poolWaits = n
				}
			}
			var seen []string
			if err := h.q.WithContext(ctx).Raw(query).Scan(&seen).Error; err != nil {
				seen = []string{"(not sampled: " + firstWords(err.Error()) + ")"} // a restarted server, a cut session
			}
			waits = append(waits, seen...)
			h.waits.mu.Lock()
			h.waits.s = append(h.waits.s, dbWait{at: at, waits: waits, load: loadAverage()})
			h.waits.mu.Unlock()
		}
	}
}

// loadAverage reads the 1-minute load average (0 where it cannot).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

// quiet reports whether at least least samples fell within [from, to] and
// none of them saw a writer wait for anything but other writers (nor the
// writers' process run late, nor a writer wait for a pooled connection).
func (w *dbWaits) quiet(from, to time.Time, least int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.s {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		if !slices.ContainsFunc(s.waits, func(x string) bool { return !onWriters(x) }) {
			n++
			continue
		}
		return false
	}
	return n >= least
}

// onWriters reports whether a PostgreSQL wait (pgWaitQuery's line) is held
// by writers alone: the application's own contention (a row of accounts,
// the extension of its table), not Herald's. A writer that waits on Herald
// in turn shows in the same sample as a wait of its own.
func onWriters(wait string) bool {
	_, blockers, ok := strings.Cut(wait, " <- ")
	if !ok || blockers == "nobody" {
		return false
	}
	for _, b := range strings.Split(blockers, "; ") {
		if !strings.HasPrefix(b, "chaos_writer (") {
			return false
		}
	}
	return true
}

// during says what the samples within [from, to] saw: the lock waits by
// count, most first, and the highest load.
func (w *dbWaits) during(from, to time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts := map[string]int{}
	load, n := 0.0, 0
	for _, s := range w.s {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		n++
		load = max(load, s.load)
		for _, x := range s.waits {
			counts[x]++
		}
	}
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b string) int { return counts[b] - counts[a] })
	var parts []string
	for _, k := range keys[:min(len(keys), 3)] {
		parts = append(parts, fmt.Sprintf("%d× %s", counts[k], k))
	}
	if len(parts) == 0 {
		parts = []string{"no writer seen waiting"}
	}
	return fmt.Sprintf("%s; load up to %.1f (%d samples)", strings.Join(parts, ", "), load, n)
}
