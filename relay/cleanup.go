package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/outbound"
)

// cleaner deletes published events older than Retention, a batch at a time, on
// one instance at a time where the database can tell (PostgreSQL: an advisory
// lock), every CleanupInterval (jittered). When the next cleanup is due is
// kept from Run to Run: a relay run again and again for short whiles (a
// fleet's tenant) cleans at the first Run past that time.
func (r *Relay) cleaner(ctx context.Context) {
	lim := newLimiter(30 * time.Second)
	for {
		next := r.cleanNext.Load()
		if next == 0 {
			next = time.Now().Add(jitter(r.cfg.CleanupInterval)).UnixNano()
			r.cleanNext.Store(next)
		}
		if !outbound.Sleep(ctx, time.Until(time.Unix(0, next))) {
			return
		}
		r.cleanNext.Store(time.Now().Add(jitter(r.cfg.CleanupInterval)).UnixNano())
		n, err := r.Cleanup(ctx)
		if err != nil && ctx.Err() == nil && lim.allow() {
			r.log.Warn("cleanup failed", "err", err, "suppressed", lim.suppressed())
		} else if n > 0 {
			r.log.Debug("cleanup", "deleted", n)
		}
	}
}

// Cleanup deletes published events older than Retention now, in batches of
// CleanupBatch, unless another instance is cleaning; it returns how many it
// deleted. The cleaner calls it every CleanupInterval when Retention > 0.
//
// With DropPartitions on a partitioned outbox it first creates the coming
// partitions and drops those past the retention (see Config.DropPartitions),
// then deletes in batches (and counts) only the default partition's events
// past the retention.
func (r *Relay) Cleanup(ctx context.Context) (int64, error) {
	if r.cfg.Retention <= 0 {
		return 0, nil
	}
	clean := r.st.Cleanup
	if r.partitioned.Load() {
		created, dropped, err := r.st.MaintainPartitions(ctx, r.db, r.cfg.PartitionInterval, r.cfg.Retention)
		if created > 0 || dropped > 0 {
			r.log.Debug("partitions", "created", created, "dropped", dropped)
		}
		if err != nil {
			r.log.Warn("partitions: some could not be created or dropped; retried at the next cleanup", "err", err)
		}
		clean = r.st.CleanupDefault
	}
	var total int64
	for {
		n, err := clean(ctx, r.db, r.cfg.Retention, r.cfg.CleanupBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("relay: cleanup: %w", err)
		}
		if n < int64(r.cfg.CleanupBatch) {
			return total, nil
		}
	}
}
