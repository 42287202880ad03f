package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// commitMarks counts the outcome (what was published happened, whether or not
// its marks commit), writes its marks in the batch and commits them, then
// lets the outage recovery see the batch (see health), fenced by all (ordered
// mode). When the batch's fence lost a lease (store.ErrLeaseLost), the marks
// of the partitions still held commit and the error is returned: the batch
// outlived its lease.
func (r *Relay) commitMarks(ctx context.Context, b store.Batch, out *outcome, all *store.Fence) error {
	r.m.record(out)
	lost, err := r.mark(ctx, b, out)
	if err != nil {
		return err
	}
	if err := b.Commit(ctx); err != nil {
		return err
	}
	if lost != nil {
		return fmt.Errorf("marks: %w", lost)
	}
	r.recoverOutage(ctx, out, all)
	return nil
}

// mark records the outcome in the batch: published rows are deleted (or
// stamped processed), failed ones scheduled for a retry or dead; in ordered
// mode fenced by the batch's fence. lost is the fence's store.ErrLeaseLost:
// the marks of the partitions still held were written.
func (r *Relay) mark(ctx context.Context, b store.Batch, out *outcome) (lost, err error) {
	if r.hooks.afterPublish != nil {
		if err := r.hooks.afterPublish(); err != nil {
			return nil, err
		}
	}
	if len(out.ok) > 0 {
		ids := make([]string, len(out.ok))
		for i, rw := range out.ok {
			ids[i] = rw.ID
		}
		if err := b.MarkPublished(ctx, ids); errors.Is(err, store.ErrLeaseLost) {
			lost = err
		} else if err != nil {
			return nil, fmt.Errorf("mark published: %w", err)
		}
	}
	if len(out.failed) == 0 {
		return lost, nil
	}
	dead, err := r.markFailed(ctx, b, out)
	if errors.Is(err, store.ErrLeaseLost) {
		return err, nil // which rows it wrote is unknown: no log of them
	}
	if err != nil {
		return nil, fmt.Errorf("mark failed: %w", err)
	}
	r.logFailures(out, dead)
	return lost, nil
}

// markFailed records every failure of out: an attempt, and a strike when the
// failure is confirmed (see evidence); death or the delay of the retry,
// counted from the database's clock, as the retry policy decides (retry.go).
// It returns the ids that went dead and sets out.failedAt to the database's
// time of the marks.
func (r *Relay) markFailed(ctx context.Context, b store.Batch, out *outcome) (map[string]bool, error) {
	r.awaitConfirmer(ctx, out)
	fs := make([]store.Failure, len(out.failed))
	dead := map[string]bool{}
	for i, f := range out.failed {
		strike := !f.poison && (f.rejected || out.ev.SucceededSince(f.end) ||
			r.cfg.Confirmer != nil && r.cfg.Confirmer.SucceededSince(f.end))
		d := r.decide(f, strike)
		fs[i] = store.Failure{ID: f.row.ID, Err: f.err, Strike: strike, Dead: d.Dead, Delay: d.Delay}
		if fs[i].Dead {
			dead[f.row.ID] = true
		}
	}
	at, marked, err := r.markFailures(ctx, b, fs)
	if err != nil {
		return nil, err
	}
	if len(marked) < len(fs) {
		dead = map[string]bool{}
		for _, f := range marked {
			if f.Dead {
				dead[f.ID] = true
			}
		}
	}
	out.failedAt = at
	r.m.died(len(dead))
	return dead, nil
}

// confirmWait bounds how long a batch whose failures nothing of its own
// confirmed waits for the Config.Confirmer to see a later publish succeed
// (the WAL relay publishes the stream's next events within milliseconds
// while there is traffic).
const confirmWait = 500 * time.Millisecond

// awaitConfirmer waits, when the relay has a Confirmer, until it confirms
// every failure of out that nothing else confirmed, or confirmWait (at most
// PublishTimeout, so that a short lease is not lost to it) passed,
// or ctx is done: the Confirmer's publishes run beside the batch, and the
// one that follows a failure may come a few milliseconds after it.
func (r *Relay) awaitConfirmer(ctx context.Context, out *outcome) {
	if r.cfg.Confirmer == nil {
		return
	}
	unconfirmed := func() bool {
		for _, f := range out.failed {
			if !f.poison && !f.rejected && !out.ev.SucceededSince(f.end) && !r.cfg.Confirmer.SucceededSince(f.end) {
				return true
			}
		}
		return false
	}
	if !unconfirmed() {
		return
	}
	wait := time.NewTimer(min(confirmWait, r.cfg.PublishTimeout))
	defer wait.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for unconfirmed() {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
			return
		case <-tick.C:
		}
	}
}

// unstorableError is stored as last_error, in place of the error text, for a
// failure whose mark the database refused with its own text.
const unstorableError = "publish failed; the database refused to store the publisher's error text"

// markFailures writes the failure marks fs in the batch so that none of them
// can undo the marks written before them (the batch's published events, which
// would otherwise be published again on every cycle): in one call under a
// savepoint; if that fails, each failure alone under one, and one whose mark
// fails again once more with unstorableError for its text. A failure that
// cannot be marked even so leaves its event pending (its publish is retried;
// the batch tells its driver); it is logged. It returns the time of the
// marks, the failures marked, and an error only when the batch's transaction
// is lost or its fence found a lease lost (store.ErrLeaseLost).
func (r *Relay) markFailures(ctx context.Context, b store.Batch, fs []store.Failure) (time.Time, []store.Failure, error) {
	var at time.Time
	mark := func(batch []store.Failure) error {
		return b.Savepoint(ctx, func() error {
			t, err := b.MarkFailed(ctx, batch)
			if err == nil && (at.IsZero() || t.Before(at)) {
				at = t
			}
			return err
		})
	}
	err := mark(fs)
	if err == nil || errors.Is(err, store.ErrTxLost) || errors.Is(err, store.ErrLeaseLost) {
		// A lease lost: the savepoint took back the failures of the
		// partitions still held too; they are retried (unmarked).
		return at, fs, err
	}
	marked := make([]store.Failure, 0, len(fs))
	for _, f := range fs {
		err := mark([]store.Failure{f})
		if err != nil && !errors.Is(err, store.ErrTxLost) {
			r.log.Warn("the failure mark of an event was refused; retried without its error text",
				"event_id", f.ID, "err", err)
			f.Err = unstorableError
			err = mark([]store.Failure{f})
		}
		switch {
		case errors.Is(err, store.ErrTxLost), errors.Is(err, store.ErrLeaseLost):
			return at, nil, err
		case err != nil:
			r.log.Warn("the failure of an event could not be recorded; it stays pending", "event_id", f.ID, "err", err)
		default:
			marked = append(marked, f)
		}
	}
	return at, marked, nil
}
