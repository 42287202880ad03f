package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/heraldgo/herald/internal/pgtest"
)

// result is one scenario's measurement.
type result struct {
	ops      int
	elapsed  time.Duration
	p50, p99 time.Duration
}

func (r result) perSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// load runs op from n goroutines for d and measures every call's latency.
func load(ctx context.Context, n int, d time.Duration, op func(ctx context.Context) error) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		all  []time.Duration
		ferr error
	)
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1<<14)
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := op(context.WithoutCancel(ctx)); err != nil {
					mu.Lock()
					ferr = err
					mu.Unlock()
					cancel()
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if ferr != nil {
		return result{}, ferr
	}
	slices.Sort(all)
	return result{ops: len(all), elapsed: elapsed, p50: pct(all, 0.50), p99: pct(all, 0.99)}, nil
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*q)]
}

// median of the rounds by throughput, keeping that round's latencies.
func median(rs []result) result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b result) int {
		switch {
		case a.perSec() < b.perSec():
			return -1
		case a.perSec() > b.perSec():
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// scratchSchema creates a schema for one scenario and returns its DSN and a
// function that drops it.
func scratchSchema(admin *sql.DB) (string, func(), error) {
	name := pgtest.Name("herald_bench_")
	if _, err := admin.Exec(`CREATE SCHEMA ` + name); err != nil {
		return "", nil, fmt.Errorf("create schema: %w", err)
	}
	return pgtest.WithSearchPath(pgtest.DSN(), name), func() { _, _ = admin.Exec(`DROP SCHEMA ` + name + ` CASCADE`) }, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startProfile starts a CPU profile into path (nothing when path is empty) and
// returns the function that stops it.
func startProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cpu profile:", err)
		}
	}, nil
}
