package relay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/store"
)

// heartbeatInterval is how often an unordered relay records in the instance
// table (<outbox>_relays) that it is alive, so that the admin page and the
// herald command can tell whether any relay runs. An ordered relay's leases
// record it every third of LeaseDuration instead.
const heartbeatInterval = 10 * time.Second

// heartbeatKeep is how long an instance's row outlives its last heartbeat:
// a relay that stopped (or was killed: an ordered relay deletes its row
// only when it stops cleanly) stays listed, with when it was last seen,
// until a relay of either mode prunes it (pruner).
const heartbeatKeep = 24 * time.Hour

// pruneEvery is how often a running relay deletes the instance rows older
// than heartbeatKeep, after doing so at its start; pruneRetry is how soon it
// tries again after a prune failed.
const (
	pruneEvery = time.Hour
	pruneRetry = time.Minute
)

// pruner deletes the instance table's rows not seen for heartbeatKeep, at a
// relay's start and every pruneEvery after: the one place both modes prune
// (the unordered relay's heartbeat calls it, the ordered relay's leases too).
// The relay keeps one (Relay.pruner) from Run to Run: a relay run again and
// again (a fleet's tenant) prunes at its first start, then every pruneEvery.
type pruner struct {
	r  *Relay
	hb store.Heartbeats

	mu   sync.Mutex
	next time.Time // when the next prune is due; zero: at the next call
}

func (r *Relay) newPruner() *pruner { return &pruner{r: r, hb: r.drv.Heartbeats(r.table)} }

// prune deletes the rows past heartbeatKeep when a prune is due. A failure
// (the table missing, a role without DELETE on it) is logged at debug level
// and tried again pruneRetry later; the relay works all the same.
func (p *pruner) prune(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Before(p.next) {
		return
	}
	if err := p.hb.Prune(ctx, p.r.db, heartbeatKeep); err != nil {
		if ctx.Err() == nil {
			p.r.log.Debug("relay: prune the instance table", "err", err)
		}
		p.next = now.Add(pruneRetry)
		return
	}
	p.next = now.Add(pruneEvery)
}

// heartbeat records, every heartbeatInterval until ctx is done, that this
// unordered relay (Run starts it without leases) is alive: one upsert of its
// own row, in a statement of its own, holding no lock across anything. It
// makes the instance table when missing (unordered relays need it for
// nothing else; a table that exists needs no right to create one), and
// prunes it (pruner). A failure, to make the table (no right to) or to beat,
// is logged at a limited rate and retried, backing off (faultBackoff from
// heartbeatInterval): the relay publishes all the same, and its heartbeat
// resumes once the fault is gone. The row is kept when the relay stops.
func (r *Relay) heartbeat(ctx context.Context) {
	hb := r.drv.Heartbeats(r.table)
	lim := newLimiter(5 * time.Minute)
	beat := func() error {
		if !r.hbMade.Load() {
			if err := hb.Create(ctx, r.db); err != nil {
				return fmt.Errorf("create the instance table: %w", err)
			}
			r.hbMade.Store(true)
		}
		r.pruner.prune(ctx)
		return hb.Beat(ctx, r.db, r.cfg.InstanceID)
	}
	for fails := 0; ; {
		wait := heartbeatInterval
		if err := beat(); err != nil {
			if ctx.Err() != nil {
				return
			}
			fails++
			wait = faultBackoff(heartbeatInterval, fails)
			if lim.allow() {
				r.log.Warn("relay: heartbeat failed; the admin page and herald status cannot tell whether this relay is alive; retrying",
					"err", err, "tries", fails, "suppressed", lim.suppressed())
			}
		} else {
			fails = 0
		}
		if !outbound.Sleep(ctx, wait) {
			return
		}
	}
}
