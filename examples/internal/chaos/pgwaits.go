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

// On PostgreSQL a slow save is told apart by sampling: every 100ms the host
// reads which of the writers' sessions wait for a lock, on what, and who
// holds it (pg_blocking_pids), and the machine's load; the slow saves'
// report names what was seen during them.

// pgWait is one sample: the writers' lock waits seen then, and the load.
type pgWait struct {
	at    time.Time
	waits []string // "wait event <- blocker (its state: its query)"
	load  float64  // 1-minute load average
}

// pgWaits are the samples of a run.
type pgWaits struct {
	mu sync.Mutex
	s  []pgWait
}

const pgWaitQuery = `SELECT a.wait_event_type || ':' || coalesce(a.wait_event, '') || ' <- ' ||
  coalesce((SELECT string_agg(b.application_name || ' (' || coalesce(b.state, '') || ': ' || left(coalesce(b.query, ''), 60) || ')', '; ')
            FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(a.pid))), 'nobody')
FROM pg_stat_activity a WHERE a.application_name = 'chaos_writer' AND a.wait_event_type = 'Lock'`

// pgWaitLoop samples until ctx ends (PostgreSQL, judged saves only).
func (h *host) pgWaitLoop(ctx context.Context) {
	if h.kind != postgresDB || !h.o.judgedSaves {
		return
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case at := <-t.C:
			var waits []string
			if err := h.q.WithContext(ctx).Raw(pgWaitQuery).Scan(&waits).Error; err != nil {
				continue // a restarted server, a cut session: the next sample
			}
			h.pgw.mu.Lock()
			h.pgw.s = append(h.pgw.s, pgWait{at: at, waits: waits, load: loadAverage()})
			h.pgw.mu.Unlock()
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

// during says what the samples within [from, to] saw: the lock waits by
// count, most first, and the highest load.
func (w *pgWaits) during(from, to time.Time) string {
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
		parts = []string{"no writer waited for a lock"}
	}
	return fmt.Sprintf("%s; load up to %.1f (%d samples)", strings.Join(parts, ", "), load, n)
}
