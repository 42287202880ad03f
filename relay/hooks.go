package relay

import (
	"github.com/heraldgo/herald/internal/relayhook"
)

// testHooks lets this package's tests put faults at exact points.
type testHooks struct {
	afterPublish func() error    // between the broker's ack and the mark; an error stands for a crash there
	point        relayhook.Hook  // the points of a batch (the tests of any package: relayhook)
	round        relayhook.Round // how each round ended (a fleet: relayhook)
}

// rounded tells the round hook, if there is one, how a round ended.
func (r *Relay) rounded(n int, err error) {
	if r.hooks.round == nil {
		return
	}
	leased := true
	if l := r.leases; l != nil {
		l.mu.RLock()
		leased = len(l.until) > 0
		l.mu.RUnlock()
	}
	r.hooks.round(relayhook.RoundInfo{Claimed: n, Err: err, Leased: leased})
}

// at calls the test hook of point p, if there is one.
func (r *Relay) at(p relayhook.Point, err error) {
	if r.hooks.point != nil {
		r.hooks.point(p, err)
	}
}
