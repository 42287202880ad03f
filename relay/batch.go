package relay

import (
	"context"
	"time"
)

// markMargin is what a batch has, past its last publish's PublishTimeout,
// for its marks and their commit before its database work is cancelled.
const markMargin = 30 * time.Second

// batchContexts returns the contexts of one batch: bctx for its database work,
// not cancelled with Run's context (so that a batch in flight finishes at
// shutdown) but bounded in time; and startBy, after which no Publish call starts
// (see publish), so that publishing ends by startBy + PublishTimeout.
func (r *Relay) batchContexts(ctx context.Context, startBy time.Time) (bctx, start context.Context, cancel func()) {
	bctx, c1 := context.WithDeadline(context.WithoutCancel(ctx), startBy.Add(r.cfg.PublishTimeout+markMargin))
	start, c2 := context.WithDeadline(bctx, startBy)
	return bctx, start, func() { c2(); c1() }
}
