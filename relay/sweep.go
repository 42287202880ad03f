package relay

import (
	"context"
	"time"

	"github.com/heraldgo/herald/internal/outbound"
)

// sweepDuty bounds the database time the sweep may take: after a sweep whose
// head scan (its claim, or its probe) took d, the next waits at least
// sweepDuty·d (and SweepInterval), so that however many dead rows a long
// transaction keeps, sweeping costs at most 0.5% of the time. Publishing the
// batch a sweep found does not count: a slow broker would push the next sweep
// out by 200 times its publish, and events released by a dead instance would
// wait minutes.
const sweepDuty = 200

// sweeper sweeps every SweepInterval while Run runs (see
// Config.SweepInterval), in a cycle of its own beside the claims of loop: in
// unordered mode it claims a batch from the head of the outbox's index and
// publishes it; in ordered mode it looks for due events below the owned
// partitions' positions and lowers them there, for the next claim. The next
// sweep starts between half and all of max(SweepInterval, sweepDuty × the
// last head scan) after the last sweep ended.
func (r *Relay) sweeper(ctx context.Context) {
	lim := newLimiter(30 * time.Second)
	wait := r.cfg.SweepInterval
	for outbound.Sleep(ctx, jitter(wait)) {
		scan, err := r.sweep(ctx)
		wait = max(r.cfg.SweepInterval, sweepDuty*scan)
		if err != nil && ctx.Err() == nil && lim.allow() {
			r.log.Warn("relay sweep failed", "err", err, "suppressed", lim.suppressed())
		}
	}
}

// sweep sweeps once and returns how long its head scan took.
func (r *Relay) sweep(ctx context.Context) (time.Duration, error) {
	if r.leases == nil {
		_, took, err := r.cycleUnorderedFrom(ctx, true)
		return took, err
	}
	l := r.leases
	l.mu.RLock()
	owned := make([]int32, 0, len(l.until))
	for part := range l.until {
		owned = append(owned, int32(part))
	}
	l.mu.RUnlock()
	if len(owned) == 0 {
		return 0, nil
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	start := time.Now()
	n, err := r.st.Sweep(pctx, r.db, r.cfg.Partitions, owned)
	took := time.Since(start)
	if err != nil {
		return took, err
	}
	if n > 0 {
		r.Wake()
	}
	return took, nil
}
