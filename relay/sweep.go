package relay

import (
	"context"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// sweepDuty bounds the time the sweep may take: after a sweep that took d,
// the next waits at least sweepDuty·d (and SweepInterval), so that however
// many dead rows a long transaction keeps, sweeping costs at most 0.5% of the
// time.
const sweepDuty = 200

// sweeper sweeps every SweepInterval while Run runs (see
// Config.SweepInterval), in a cycle of its own beside the claims of loop: in
// unordered mode it claims a batch from the head of the outbox's index and
// publishes it; in ordered mode it looks for due events below the owned
// partitions' positions and lowers them there, for the next claim.
func (r *Relay) sweeper(ctx context.Context) {
	p, ok := r.st.(positioned)
	if !ok {
		return
	}
	sw := p.Sweeper()
	lim := newLimiter(30 * time.Second)
	wait := r.cfg.SweepInterval
	for sleep(ctx, jitter(wait)) {
		start := time.Now()
		err := r.sweep(ctx, p, sw)
		wait = max(r.cfg.SweepInterval, sweepDuty*time.Since(start))
		if err != nil && ctx.Err() == nil {
			r.rewind()
			if lim.allow() {
				r.log.Warn("relay sweep failed", "err", err, "suppressed", lim.suppressed())
			}
		}
	}
}

func (r *Relay) sweep(ctx context.Context, p positioned, sw store.Relay) error {
	if r.leases == nil {
		_, err := r.cycleUnorderedOn(ctx, sw)
		return err
	}
	l := r.leases
	l.mu.RLock()
	owned := make([]int32, 0, len(l.until))
	for part := range l.until {
		owned = append(owned, int32(part))
	}
	l.mu.RUnlock()
	if len(owned) == 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	n, err := p.Probe(pctx, r.db, r.cfg.Partitions, owned)
	if err != nil {
		return err
	}
	if n > 0 {
		r.Wake()
	}
	return nil
}
