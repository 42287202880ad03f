package relay

import (
	"context"
	"sync"
	"time"

	"github.com/heraldgo/herald/internal/outbound"
)

// loop claims and publishes batches until ctx is done.
func (r *Relay) loop(ctx context.Context) {
	var (
		fails    int
		recheck  time.Duration // after a wake that found nothing: the events may not be committed yet
		errLimit = newLimiter(30 * time.Second)
		poll     = time.NewTimer(r.cfg.PollInterval)
	)
	defer poll.Stop()
	backlog := false
	for {
		n, full, err := r.round(ctx, backlog)
		if ctx.Err() != nil {
			return
		}
		r.rounded(n, err)
		if err != nil {
			fails++
			if errLimit.allow() {
				r.log.Warn("relay cycle failed; backing off", "err", err, "failures", fails, "suppressed", errLimit.suppressed())
			}
			if !outbound.Sleep(ctx, faultBackoff(50*time.Millisecond, fails)) {
				return
			}
			continue
		}
		if fails > 0 {
			r.log.Info("relay resumed", "after_failures", fails)
			fails = 0
		}
		if backlog = full; full {
			continue // more may be due
		}
		var timeout <-chan time.Time
		if n == 0 && recheck > 0 && recheck < r.cfg.PollInterval {
			timeout = time.After(recheck)
			recheck *= 4
		} else {
			recheck = 0
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(r.untilDue(ctx))
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			recheck = time.Millisecond
		case <-timeout:
		case <-poll.C:
		}
	}
}

// workerRun is how many batches in a row a worker of a round may run: while
// its batches come back full it claims the next at once, without waiting for
// the other workers' batches, then the round ends (and the loop decides again).
const workerRun = 8

// round runs one batch, or under a backlog Workers at once, each running
// batches while they come back full (at most workerRun), each batch in its own
// transaction; in ordered mode each worker on its own share of the partitions.
// It returns how many events they claimed and whether a worker's last batch
// came back full (more may be due).
func (r *Relay) round(ctx context.Context, backlog bool) (n int, full bool, err error) {
	k := 1
	if backlog {
		k = r.cfg.Workers
	}
	if k == 1 {
		n, err = r.cycle(ctx, 0, 1)
		return n, n >= r.cfg.BatchSize, err
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for w := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range workerRun {
				got, cerr := r.cycle(ctx, w, k)
				mu.Lock()
				n += got
				more := got >= r.cfg.BatchSize
				if cerr != nil && err == nil {
					err = cerr
				}
				stop := !more || err != nil || ctx.Err() != nil || i == workerRun-1
				if stop {
					full = full || more
				}
				mu.Unlock()
				if stop {
					return
				}
			}
		}()
	}
	wg.Wait()
	return n, full, err
}

// cycle claims one batch, publishes it and marks the outcome. It returns how
// many events it claimed. worker and of split the ordered partitions between
// concurrent cycles.
func (r *Relay) cycle(ctx context.Context, worker, of int) (int, error) {
	if r.leases != nil {
		return r.cycleOrdered(ctx, worker, of)
	}
	return r.cycleUnordered(ctx)
}

// untilDue is how long the loop may wait for a wake-up: the poll interval,
// or less when a scheduled event comes due sooner by the database's clock, so
// that it is published when due, not at the next poll. The database is asked
// at each wait, so moves and cancellations by any process count from the
// next. Retries do not shorten the wait: one claimed alone at its due time
// would have no later publish in its batch to confirm its failure (a strike),
// so a poisoned event would never die while traffic is light; claimed at the
// next poll or wake-up it goes with whatever else is due.
func (r *Relay) untilDue(ctx context.Context) time.Duration {
	d, ok, err := r.st.NextDue(ctx, r.db)
	if err != nil || !ok || d >= r.cfg.PollInterval {
		return r.cfg.PollInterval
	}
	return max(d, 0) + time.Millisecond
}
