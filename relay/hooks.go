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
	if r.hooks.round != nil {
		r.hooks.round(n, err)
	}
}

// at calls the test hook of point p, if there is one.
func (r *Relay) at(p relayhook.Point, err error) {
	if r.hooks.point != nil {
		r.hooks.point(p, err)
	}
}
