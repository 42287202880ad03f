package walrelay

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/internal/outbound"
)

// Publishing and its outcome: the session's pending events published
// together (flush), the held ones retried when due, and what each call's
// result makes of its events: settled, held to be tried again, or parked
// (park.go) once their failure is told to be their own.

// flush publishes the pending events, in stream order: each run of one
// topic in one call (at most Config.BatchSize, since the session takes no
// more), as long as the broker does not look down; then it holds the rest
// untried.
func (s *session) flush(ctx context.Context) error {
	buf := s.pending
	for len(s.pending) > 0 {
		n := 1
		for n < len(s.pending) && s.pending[n].row.Topic == s.pending[0].row.Topic {
			n++
		}
		run := s.pending[:n]
		var err error
		if s.streak >= 2 {
			for _, h := range run {
				s.hold(h)
			}
		} else {
			err = s.tryRun(ctx, run)
		}
		// Until now they held the position back as pending; the failed
		// ones are held now.
		clear(run)
		s.pending = s.pending[n:]
		if err != nil {
			return err
		}
	}
	s.pending = buf[:0]
	clear(s.pendingAggs)
	s.advance()
	return nil
}

// tryRun publishes run, events of one topic, in one call, and settles each
// by its result as try does. A BatchPublisher's results are per message;
// a Publish call that fails tells nothing of which message failed, so its
// events are published again, one call each, as the table relay does, and
// those calls count (the failed call of several counts for none: it
// confirms and proves nothing).
func (s *session) tryRun(ctx context.Context, run []*held) error {
	if len(run) == 1 {
		return s.try(ctx, run[0], false)
	}
	msgs := make([]*message.Message, len(run))
	now := time.Now()
	for i, h := range run {
		h.tried = now
		msgs[i] = h.message()
	}
	errs, took := s.r.call(ctx, s.c, run[0].row.Topic, msgs)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !s.c.Batch() {
		if errs[0] == nil {
			s.r.m.call(took, len(run), 0)
			return s.succeeded(ctx)
		}
		s.r.m.call(took, 0, 0)
		// A failed call after a lone failure: two in a row, so that one is
		// no longer told to be its event's own (it stays held, tried again).
		s.lastFailed = nil
		s.r.log.DebugContext(ctx, "walrelay: publish of several events failed; publishing them one by one",
			"error", errs[0], "events", len(run), "topic", run[0].row.Topic)
		for i, h := range run {
			if s.streak >= 2 { // down: the rest wait, untried
				for _, o := range run[i:] {
					s.hold(o)
				}
				return nil
			}
			if err := s.try(ctx, h, false); err != nil {
				return err
			}
		}
		return nil
	}
	var ok int
	var failed, refused []*held
	for i, h := range run {
		switch err := errs[i]; {
		case err == nil:
			ok++
		case outbound.Refused(err):
			h.err = err
			refused = append(refused, h)
		default:
			s.failed(ctx, h, err)
			failed = append(failed, h)
		}
	}
	s.r.m.call(took, ok, len(failed)+len(refused))
	// The call's failures held first, so that nothing settles past them.
	for _, h := range failed {
		s.hold(h)
	}
	if ok > 0 {
		// A success confirms the lone failed call before it; the failures
		// of this call are confirmed by a later call, as the table relay
		// counts a BatchPublisher's (a message acknowledged in the same
		// call confirms nothing), each as a failed call of its own: one
		// alone between successes is its event's, two or more in a row
		// may be an outage.
		if err := s.succeeded(ctx); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		s.streak += len(failed)
		s.lastFailed = failed[len(failed)-1]
		s.retryAt = time.Now().Add(s.r.cfg.RetryInterval)
	}
	for _, h := range refused {
		s.r.log.WarnContext(ctx, "walrelay: event refused by the broker; parked in the outbox table",
			"error", h.err, "event", h.row.ID, "topic", h.row.Topic, "lsn", h.lsn, "table", s.r.table.String())
		if err := s.parkWith(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

// retryDue reports whether a held event is due to be tried.
func (s *session) retryDue() bool { return len(s.held) > 0 && !time.Now().Before(s.retryAt) }

// retry tries the next held event of the pass: the first of its aggregate
// in ordered mode, any in the other. After a failed call it takes, of those
// not yet tried in the pass, the one that failed least often (the first in
// stream order of those), so that a success can confirm that failure as its
// event's own: two events that always fail, tried back to back in every
// pass, would look like an outage forever.
func (s *session) retry(ctx context.Context) error {
	for range 2 {
		seen := map[string]bool{}
		var next *held
		for _, h := range s.held {
			if s.r.cfg.Ordered && h.agg != "" {
				if seen[h.agg] {
					continue
				}
				seen[h.agg] = true
			}
			if !h.tried.Before(s.round) {
				continue
			}
			if s.streak == 0 {
				return s.try(ctx, h, true)
			}
			if next == nil || h.fails < next.fails {
				next = h
			}
		}
		if next != nil {
			return s.try(ctx, next, true)
		}
		s.round = time.Now() // every one was tried in this pass: the next
	}
	return nil
}

// try publishes h once, in a call of its own: published, it is settled;
// refused by the broker (relay.ErrRejected), parked; failed otherwise, held
// (again).
func (s *session) try(ctx context.Context, h *held, isHeld bool) error {
	h.tried = time.Now()
	errs, took := s.r.call(ctx, s.c, h.row.Topic, []*message.Message{h.message()})
	err := errs[0]
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		s.r.m.call(took, 1, 0)
	} else {
		s.r.m.call(took, 0, 1)
	}
	switch {
	case err == nil:
		if isHeld {
			s.remove([]*held{h})
		}
		return s.succeeded(ctx)
	case outbound.Refused(err):
		h.err = err
		s.r.log.WarnContext(ctx, "walrelay: event refused by the broker; parked in the outbox table",
			"error", err, "event", h.row.ID, "topic", h.row.Topic, "lsn", h.lsn, "table", s.r.table.String())
		if isHeld {
			s.retryAt = time.Now()
		}
		return s.parkWith(ctx, h)
	default:
		s.failed(ctx, h, err)
		if !isHeld {
			s.hold(h)
		}
		s.streak++
		s.lastFailed = h
		s.retryAt = time.Now().Add(s.r.cfg.RetryInterval)
		return nil
	}
}

// failed logs h's failure, at Warn the first time, and keeps it.
func (s *session) failed(ctx context.Context, h *held, err error) {
	const logMsg = "walrelay: publish failed; retrying"
	if h.err == nil { // its first failure; its retries' at Debug
		s.r.log.WarnContext(ctx, logMsg, "error", err, "event", h.row.ID, "topic", h.row.Topic,
			"lsn", h.lsn, "retry_in", s.r.cfg.RetryInterval)
	} else {
		s.r.log.DebugContext(ctx, logMsg, "error", err, "event", h.row.ID, "topic", h.row.Topic, "lsn", h.lsn)
	}
	h.err = err
	h.fails++
}

// succeeded follows a successful publish: the failure of the one call
// before it, if it was alone since the last success, is confirmed, the
// event's own, and the event is parked; after two or more failures in a row
// (the broker may have been down) the held events are all tried again, in
// order, from now on.
func (s *session) succeeded(ctx context.Context) error {
	lone := s.streak == 1 && s.lastFailed != nil && s.isHeld(s.lastFailed)
	if s.streak >= 2 {
		s.round = time.Now()
	}
	f := s.lastFailed
	s.streak, s.lastFailed = 0, nil
	s.retryAt = time.Now()
	if lone {
		s.r.log.WarnContext(ctx, "walrelay: publish failed while others succeeded; parked in the outbox table",
			"error", f.err, "event", f.row.ID, "topic", f.row.Topic, "lsn", f.lsn, "table", s.r.table.String())
		return s.parkWith(ctx, f)
	}
	s.advance()
	return nil
}

// call publishes msgs (of topic) in one call of c, within
// Config.PublishTimeout, and returns each message's error and how long the
// call took. A call that published a message counts for SucceededSince.
func (r *Relay) call(ctx context.Context, c *outbound.Caller, topic string, msgs []*message.Message) ([]error, time.Duration) {
	res := c.Call(ctx, topic, msgs)
	r.ok.Add(res)
	return res.Errs, res.End.Sub(res.Start)
}
