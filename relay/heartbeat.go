package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
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
// relay's start (a fleet tenant's relay: see newPruner) and every pruneEvery
// after: the one place both modes prune (the unordered relay's heartbeat
// calls it, the ordered relay's leases too). The relay keeps one
// (Relay.pruner) from Run to Run: a relay run again and again (a fleet's
// tenant) prunes every pruneEvery, not at each start.
type pruner struct {
	r  *Relay
	hb store.Heartbeats

	mu   sync.Mutex
	next time.Time // when the next prune is due; zero: at the next call
}

// newPruner returns r's pruner. A plain relay prunes at its first start; a
// fleet's tenant relay (Config.Tenant) at a random time within pruneEvery
// of its making, so that a fleet starting a thousand tenants' relays does
// not add a prune to each one's first short run, and spreads them over the
// hour.
func (r *Relay) newPruner() *pruner {
	p := &pruner{r: r, hb: r.drv.Heartbeats(r.table)}
	if r.cfg.Tenant != "" {
		p.next = time.Now().Add(rand.N(pruneEvery))
	}
	return p
}

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

// newBeatClock sets when r's first beat is due. A plain relay beats at its
// start; a fleet's tenant relay (Config.Tenant) at its first run past a
// random time within heartbeatInterval of its making, as though it had
// beaten at a random time within the interval before: a fleet starting a
// thousand tenants' relays spreads their first beats over the interval, and
// a tenant whose first runs are short (a backlog of a few events, burnt
// in milliseconds) makes no beat of its own for them. Its later runs beat
// every heartbeatInterval, as any relay does.
func (r *Relay) newBeatClock() {
	if r.cfg.Tenant != "" {
		r.beatAt.Store(time.Now().Add(rand.N(heartbeatInterval) - heartbeatInterval).UnixNano())
	}
}

// beatGrace bounds a beat (and the prune after it): it runs to its end
// even when Run ends meanwhile, since a statement cancelled mid-flight costs
// its connection (pgx closes it) and a fleet ends a tenant's short run as
// soon as its batch came back short, often with the first beat in flight.
const beatGrace = 5 * time.Second

// heartbeat records, every heartbeatInterval until ctx is done, that this
// unordered relay (Run starts it without leases) is alive: one upsert of its
// own row, in a statement of its own, holding no lock across anything. The
// interval counts from Run to Run: a relay run again within
// heartbeatInterval of its last beat (a fleet's tenant, relayed in short
// runs) beats when the interval is up, not at its start. A relay's first
// beat (newBeatClock: at Run's start; a fleet tenant's relay's later) is
// tried; only when it fails is the instance table made (when
// missing: unordered relays need it for nothing else, and a table that exists
// needs no right to create one) and the beat tried again. After a beat, it
// prunes the table (pruner). A failure, to make the table (no right to) or
// to beat, is logged at a limited rate and retried, backing off
// (faultBackoff from heartbeatInterval): the relay publishes all the same,
// and its heartbeat resumes once the fault is gone. The row is kept when the
// relay stops.
func (r *Relay) heartbeat(ctx context.Context) {
	hb := r.drv.Heartbeats(r.table)
	lim := newLimiter(5 * time.Minute)
	beat := func() error {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), beatGrace)
		defer cancel()
		err := hb.Beat(bctx, r.db, r.cfg.InstanceID)
		if err != nil && !r.hbMade.Load() { // the instance table may be missing: make it, and beat again
			if cerr := hb.Create(bctx, r.db); cerr != nil {
				return fmt.Errorf("create the instance table: %w", cerr)
			}
			err = hb.Beat(bctx, r.db, r.cfg.InstanceID)
		}
		if err != nil {
			return err
		}
		r.hbMade.Store(true)
		r.beatAt.Store(time.Now().UnixNano())
		r.pruner.prune(bctx)
		return nil
	}
	if last := r.beatAt.Load(); last != 0 {
		if due := heartbeatInterval - time.Since(time.Unix(0, last)); due > 0 && !outbound.Sleep(ctx, due) {
			return
		}
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
