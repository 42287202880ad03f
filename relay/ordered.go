package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/relayhook"
	"github.com/heraldgo/herald/internal/store"
)

// leases keeps this instance's share of the ordering partitions. Every third of
// LeaseDuration it records a heartbeat, renews its leases, gives back partitions
// above its fair share (partitions / live instances, rounded up) and takes
// expired ones up to it. A partition is only worked on while its lease has more
// than 1.25 PublishTimeout left by the local clock, so a batch always ends before
// the lease could pass to another instance; and since a process can be paused
// past that (GC, SIGSTOP, a VM freeze), every write of a batch is fenced by
// the generations of its leases (store.Fence): once another instance took a
// partition over, a late batch's writes there change nothing.
type leases struct {
	r      *Relay
	st     store.Leases
	mu     sync.RWMutex // read by a batch; written when partitions change hands
	until  map[int]time.Time
	gen    map[int]int64 // the generation of each lease in until
	seeded bool
	// lost: a batch's fence found a lease lost (store.ErrLeaseLost): no
	// batch starts until the next tick has read the leases again.
	lost atomic.Bool
}

func newLeases(r *Relay) *leases {
	return &leases{r: r, st: r.st.Leases(), until: map[int]time.Time{}, gen: map[int]int64{}}
}

func (l *leases) run(ctx context.Context) {
	lim := newLimiter(30 * time.Second)
	every := l.r.cfg.LeaseDuration / 3
	for {
		if err := l.tick(ctx); err != nil && ctx.Err() == nil && lim.allow() {
			l.r.log.Warn("partition leases: renewal failed", "err", err, "suppressed", lim.suppressed())
		}
		l.r.pruner.prune(ctx) // the rows of instances killed, which never left
		if !outbound.Sleep(ctx, every) {
			break
		}
	}
	// Shutting down: once the batch in flight is done, give the partitions back
	// so that other instances need not wait for the leases to expire.
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.until)
	clear(l.gen)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, f := range []func(context.Context, store.Execer, string) error{l.st.ReleaseAll, l.st.Leave} {
		if err := f(rctx, l.r.db, l.r.cfg.InstanceID); err != nil {
			l.r.log.Warn("partition leases: release at shutdown failed; they expire by themselves", "err", err)
			return
		}
	}
}

func (l *leases) tick(ctx context.Context) error {
	cfg := l.r.cfg
	db := l.r.db
	if !l.seeded {
		if err := l.st.Seed(ctx, db, cfg.Partitions); err != nil {
			return fmt.Errorf("seed partitions: %w", err)
		}
		l.seeded = true
	}
	if err := l.st.Heartbeat(ctx, db, cfg.InstanceID); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	live, err := l.st.Live(ctx, db, cfg.LeaseDuration)
	if err != nil {
		return fmt.Errorf("count instances: %w", err)
	}
	fair := (cfg.Partitions + max(live, 1) - 1) / max(live, 1)

	l.mu.Lock()
	defer l.mu.Unlock()
	sent := time.Now()
	mine, err := l.st.Renew(ctx, db, cfg.InstanceID, cfg.LeaseDuration)
	if err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	slices.SortFunc(mine, func(a, b store.Lease) int { return a.Partition - b.Partition })
	if len(mine) > fair {
		excess := make([]int, 0, len(mine)-fair)
		for _, m := range mine[fair:] {
			excess = append(excess, m.Partition)
		}
		if err := l.st.Release(ctx, db, cfg.InstanceID, excess); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		mine = mine[:fair]
	} else if len(mine) < fair {
		got, err := l.st.Acquire(ctx, db, store.AcquireParams{Instance: cfg.InstanceID, Lease: cfg.LeaseDuration, Limit: fair - len(mine), Partitions: cfg.Partitions})
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		if len(got) > 0 {
			l.r.log.Info("partition leases taken", "partitions", got)
			defer l.r.Wake()
		}
		mine = append(mine, got...)
	}
	clear(l.until)
	clear(l.gen)
	for _, m := range mine {
		l.until[m.Partition] = sent.Add(cfg.LeaseDuration)
		l.gen[m.Partition] = m.Generation
	}
	l.lost.Store(false)
	return nil
}

// fence returns the fence of the partitions parts (held: l.mu read-locked).
func (l *leases) fence(parts []int32) *store.Fence {
	f := &store.Fence{Instance: l.r.cfg.InstanceID, Partitions: l.r.cfg.Partitions, Leases: make([]store.Lease, len(parts))}
	for i, p := range parts {
		f.Leases[i] = store.Lease{Partition: int(p), Generation: l.gen[int(p)]}
	}
	return f
}

// all returns the fence of every partition held (l.mu read-locked).
func (l *leases) all() *store.Fence {
	parts := make([]int32, 0, len(l.until))
	for p := range l.until {
		parts = append(parts, int32(p))
	}
	return l.fence(parts)
}

// usable returns the partitions a batch may work on now (those with more than
// 1.25 PublishTimeout of lease left, and in worker's share: p mod of = worker;
// none after a lease was found lost, until the next tick) and the end of the
// earliest of their leases.
func (l *leases) usable(worker, of int) ([]int32, time.Time) {
	if l.lost.Load() {
		return nil, time.Time{}
	}
	limit := time.Now().Add(l.r.cfg.PublishTimeout + l.r.cfg.PublishTimeout/4)
	var (
		out   []int32
		first time.Time
	)
	for p, until := range l.until {
		if p%of == worker && until.After(limit) {
			out = append(out, int32(p))
			if first.IsZero() || until.Before(first) {
				first = until
			}
		}
	}
	return out, first
}

// cycleOrdered works one batch of this instance's partitions: the due events in
// commit order, each aggregate's in sequence (aggregates in parallel), a failure
// holding back the rest of its aggregate.
func (r *Relay) cycleOrdered(ctx context.Context, worker, of int) (int, error) {
	l := r.leases
	l.mu.RLock()
	defer l.mu.RUnlock()
	parts, until := l.usable(worker, of)
	if len(parts) == 0 {
		return 0, nil
	}
	// No Publish call starts later than PublishTimeout (and a margin) before the
	// first of these leases ends: the batch is over before another instance could
	// take one of its partitions.
	bctx, startBy, cancel := r.batchContexts(ctx, until.Add(-r.cfg.PublishTimeout-r.cfg.PublishTimeout/4))
	defer cancel()
	b, err := r.st.Claim(bctx, r.db, store.ClaimParams{
		Limit: r.cfg.BatchSize, Keep: r.cfg.Retention > 0,
		Ordered: &store.OrderedClaim{Partitions: r.cfg.Partitions, Owned: parts, Fence: l.fence(parts)},
	})
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	defer b.Close()
	rows := toRows(b.Rows(), r.cfg.Tenant)
	if len(rows) == 0 {
		return 0, b.Commit(bctx)
	}
	r.at(relayhook.Claimed, nil)
	out := &outcome{}
	var (
		units []([]*row)
		byAgg = map[string]int{}
	)
	for _, rw := range rows {
		key := rw.AggregateType + "\x00" + rw.AggregateID
		if rw.AggregateID == "" {
			key = rw.ID
		}
		i, ok := byAgg[key]
		if !ok {
			i = len(units)
			byAgg[key] = i
			units = append(units, nil)
		}
		units[i] = append(units[i], rw)
	}
	// Rows that cannot become messages go dead at once and release the rest.
	for i, u := range units {
		for j, rw := range u {
			if rw.err != nil {
				out.add(rw, result{err: rw.err})
				units[i] = u[:j]
				break
			}
		}
	}
	r.publishOrdered(startBy, units, out)
	r.at(relayhook.Marks, nil)
	// Paused past the leases (by the monotonic clock)? The marks still go,
	// fenced: they change the rows of the partitions still held, nothing else.
	if !time.Now().Before(until) {
		r.log.Warn("relay: batch outlived its partition leases (the process was paused?); its marks are fenced", "took", out.took)
	}
	err = r.commitMarks(bctx, b, out, l.all())
	if errors.Is(err, store.ErrLeaseLost) {
		l.lost.Store(true)
	}
	r.at(relayhook.Done, err)
	return len(rows), err
}
