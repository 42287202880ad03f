package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/relayhook"
	"github.com/heraldgo/herald/internal/store"
)

// The first claim of a Run reads from the head of the pending index (where
// the database keeps a claim position): the events a Run before it stepped
// over, locked then by another batch, are found at once, not at the next
// sweep (a fleet's tenant is run again and again for short whiles, which
// no sweep may fall in).
func (r *Relay) cycleUnordered(ctx context.Context) (int, error) {
	n, _, err := r.cycleUnorderedFrom(ctx, r.fromHead.CompareAndSwap(true, false))
	return n, err
}

// cycleUnorderedFrom claims one batch of unordered mode (from the head of the
// pending index when fromHead: the sweep), publishes it and marks the
// outcome. It returns how many events it claimed and how long the claim took.
// The driver claims as its database does: a batch that locked its rows holds
// them however long it is paused, and one that leased them has its marks
// fenced by the lease (a batch paused past it, whose rows another relay
// claimed since, changes nothing).
func (r *Relay) cycleUnorderedFrom(ctx context.Context, fromHead bool) (int, time.Duration, error) {
	bctx, startBy, cancel := r.batchContexts(ctx, time.Now().Add(2*r.cfg.PublishTimeout))
	defer cancel()
	deadline, _ := bctx.Deadline()
	start := time.Now()
	b, err := r.st.Claim(bctx, r.db, store.ClaimParams{
		Limit: r.cfg.BatchSize, Hold: time.Until(deadline) + time.Second, Keep: r.cfg.Retention > 0, FromHead: fromHead,
	})
	took := time.Since(start)
	if err != nil {
		return 0, took, fmt.Errorf("claim: %w", err)
	}
	defer b.Close()
	rows := toRows(b.Rows(), r.cfg.Tenant)
	if len(rows) == 0 {
		return 0, took, b.Commit(bctx)
	}
	r.at(relayhook.Claimed, nil)
	out := r.publishUnordered(startBy, rows)
	r.at(relayhook.Marks, nil)
	err = r.commitMarks(bctx, b, out, nil)
	r.at(relayhook.Done, err)
	return len(rows), took, err
}
