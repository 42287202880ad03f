package relay

import (
	"github.com/heraldgo/herald/internal/relayhook"
)

// testHooks lets this package's tests put faults at exact points.
type testHooks struct {
	afterPublish func() error   // between the broker's ack and the mark; an error stands for a crash there
	point        relayhook.Hook // the points of a batch (the tests of any package: relayhook)
}

// at calls the test hook of point p, if there is one.
func (r *Relay) at(p relayhook.Point, err error) {
	if r.hooks.point != nil {
		r.hooks.point(p, err)
	}
}
