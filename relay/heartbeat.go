package relay

import (
	"context"
	"time"
)

// heartbeatInterval is how often an unordered relay records in the instance
// table (<outbox>_relays) that it is alive, so that the admin page and the
// herald command can tell whether any relay runs. An ordered relay's leases
// record it every third of LeaseDuration instead.
const heartbeatInterval = 10 * time.Second

// heartbeatKeep is how long an instance's row outlives its last heartbeat:
// a relay that stopped stays listed, with when it was last seen, until a
// relay starting after that long deletes it.
const heartbeatKeep = 24 * time.Hour

// heartbeat records, every heartbeatInterval until ctx is done, that this
// unordered relay (Run starts it without leases) is alive: one upsert of its own row, in a statement of its
// own, holding no lock across anything. It makes the instance table when
// missing (unordered relays need it for nothing else); without the right to,
// it logs once and stops: the relay publishes all the same. The row is kept when the relay stops.
func (r *Relay) heartbeat(ctx context.Context) {
	hb := r.drv.Heartbeats(r.table)
	if err := hb.Create(ctx, r.db); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("relay: cannot create the instance table; the admin page cannot tell whether this relay is alive", "err", err)
		}
		return
	}
	if err := hb.Prune(ctx, r.db, heartbeatKeep); err != nil && ctx.Err() == nil {
		r.log.Debug("relay: prune the instance table", "err", err)
	}
	lim := newLimiter(5 * time.Minute)
	for {
		if err := hb.Beat(ctx, r.db, r.cfg.InstanceID); err != nil && ctx.Err() == nil && lim.allow() {
			r.log.Warn("relay: heartbeat failed", "err", err, "suppressed", lim.suppressed())
		}
		if !sleep(ctx, heartbeatInterval) {
			return
		}
	}
}
