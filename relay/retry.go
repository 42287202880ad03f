package relay

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/heraldgo/herald/internal/outbound"
)

// This file owns every retry and backoff the relay does: the policy that
// decides what becomes of an event whose publish failed (RetryPolicy,
// DefaultRetryPolicy), and the backoff of the relay's own loops after a
// database fault (faultBackoff, retry).

// FailedEvent is what a RetryPolicy decides on: one event whose publish just
// failed. The counts include this failure.
type FailedEvent struct {
	// ID is the event's id.
	ID string
	// Topic and Type are the event's topic and type.
	Topic, Type string
	// Attempts is how many publishes of the event failed, this one included
	// (the attempts column after this failure).
	Attempts int
	// Strikes is how many of those failures were confirmed, this one included
	// when Confirmed (the strikes column after this failure).
	Strikes int
	// Confirmed reports that this failure is a strike: a Publish call of the
	// same batch that started after the failed one returned succeeded, so the
	// publisher worked and the failure is the event's own (see
	// Config.MaxAttempts). An unconfirmed failure may be the broker's outage.
	Confirmed bool
	// Poison reports an event that can never be published: its stored row
	// cannot become a message (ErrUndecodable).
	Poison bool
	// Err is the error the publish failed with.
	Err error
}

// RetryDecision is what becomes of a failed event.
type RetryDecision struct {
	// Dead kills the event: it is kept, with dead_at and the reason, until it
	// is requeued (admin.Outbox.Requeue). Delay is then ignored.
	Dead bool
	// Delay is how long after the failure's mark, by the database's clock,
	// the event is due again. Nothing makes it due earlier but the outage
	// recovery (see the package documentation).
	Delay time.Duration
}

// RetryPolicy decides, for each failed publish, whether the event dies and
// when it is retried. It is called from the relay's publish workers, possibly
// at once from several: an implementation must be safe for concurrent use,
// and must not block (it runs inside the batch's transaction). If it panics,
// the relay logs it and DefaultRetryPolicy decides. Set it in
// Config.RetryPolicy; DefaultRetryPolicy is the one used when none is set.
//
// A policy that kills unconfirmed failures (FailedEvent.Confirmed false) gives
// up the guarantee that a broker outage kills nothing.
type RetryPolicy interface {
	Decide(FailedEvent) RetryDecision
}

// DefaultRetryPolicy is the relay's retry policy, used when
// Config.RetryPolicy is nil with the Config's MaxAttempts, MinBackoff and
// MaxBackoff; its zero value is the policy with their defaults (12, 1s, 5m).
//
// After an event's n-th failed attempt it waits MinBackoff·2^(n-1), capped at
// MaxBackoff, with jitter: a random delay between half and all of that. An
// event dies at its MaxAttempts-th strike (a confirmed failure, see
// FailedEvent.Confirmed), never on an unconfirmed failure, so a broker outage
// kills nothing; a poison event (FailedEvent.Poison) dies at once.
type DefaultRetryPolicy struct {
	// MaxAttempts is how many strikes make an event dead. Defaults to 12.
	MaxAttempts int
	// MinBackoff is the wait after the first failed attempt. Defaults to 1s.
	MinBackoff time.Duration
	// MaxBackoff caps the wait. Defaults to 5m.
	MaxBackoff time.Duration
}

func (p DefaultRetryPolicy) withDefaults() DefaultRetryPolicy {
	setDefault(&p.MaxAttempts, defaultMaxAttempts)
	setDefault(&p.MinBackoff, defaultMinBackoff)
	setDefault(&p.MaxBackoff, defaultMaxBackoff)
	return p
}

// Decide kills a poison event, and an event at its MaxAttempts-th strike;
// any other waits the jittered backoff of its attempt count.
func (p DefaultRetryPolicy) Decide(f FailedEvent) RetryDecision {
	p = p.withDefaults()
	return RetryDecision{
		Dead:  f.Poison || (f.Confirmed && f.Strikes >= p.MaxAttempts),
		Delay: jitter(p.Backoff(f.Attempts)),
	}
}

// Backoff is the wait after the n-th failed attempt (n >= 1), before jitter:
// MinBackoff·2^(n-1), capped at MaxBackoff.
func (p DefaultRetryPolicy) Backoff(n int) time.Duration {
	p = p.withDefaults()
	return backoff(p.MinBackoff, p.MaxBackoff, n)
}

// Horizon is the sum of the un-jittered backoffs of MaxAttempts-1 retries:
// how long after its first failure an event whose failures are all confirmed
// makes its last attempt and dies (see Config.RetryHorizon).
func (p DefaultRetryPolicy) Horizon() time.Duration {
	p = p.withDefaults()
	var total time.Duration
	for n := 1; n < p.MaxAttempts; n++ {
		total += backoff(p.MinBackoff, p.MaxBackoff, n)
	}
	return total
}

// retryPolicy is the policy of a Config with defaults applied.
func (c *Config) retryPolicy() RetryPolicy {
	if c.RetryPolicy != nil {
		return c.RetryPolicy
	}
	return c.defaultRetryPolicy()
}

// defaultRetryPolicy is DefaultRetryPolicy with the Config's fields.
func (c *Config) defaultRetryPolicy() DefaultRetryPolicy {
	return DefaultRetryPolicy{MaxAttempts: c.MaxAttempts, MinBackoff: c.MinBackoff, MaxBackoff: c.MaxBackoff}
}

// decide asks the relay's policy about one failure of a batch. A policy that
// panics is logged and the default policy decides instead; a negative delay
// is none.
func (r *Relay) decide(f failure, confirmed bool) (d RetryDecision) {
	strikes := f.row.Strikes
	if confirmed {
		strikes++
	}
	ev := FailedEvent{
		ID: f.row.ID, Topic: f.row.Topic, Type: f.row.Type,
		Attempts: f.row.Attempts + 1, Strikes: strikes,
		Confirmed: confirmed, Poison: f.poison, Err: f.cause,
	}
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("the retry policy panicked; the default policy decided", "event_id", ev.ID, "panic", p)
			d = r.cfg.defaultRetryPolicy().Decide(ev)
		}
		d.Delay = max(d.Delay, 0)
	}()
	return r.cfg.retryPolicy().Decide(ev)
}

// backoff is the un-jittered wait after the n-th failure (n >= 1): minB·2^(n-1),
// capped at maxB.
func backoff(minB, maxB time.Duration, n int) time.Duration {
	d := minB
	for i := 1; i < n; i++ {
		d *= 2
		if d >= maxB {
			return maxB
		}
	}
	return min(d, maxB)
}

// jitter returns a random duration between d/2 and d.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// maxFaultBackoff caps the relay's own backoff after database faults.
const maxFaultBackoff = 30 * time.Second

// faultBackoff is the wait of one of the relay's loops after its n-th fault
// in a row (n >= 1): base·2^(n-1), capped at 30s, jittered. It is not the
// events' retry policy: a database fault is no event's failure.
func faultBackoff(base time.Duration, n int) time.Duration {
	return jitter(backoff(base, maxFaultBackoff, n))
}

// retry runs f until it succeeds or ctx is done, backing off between tries
// (faultBackoff from 100ms) and logging at a limited rate.
func retry(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) bool {
	lim := newLimiter(30 * time.Second)
	for n := 1; ; n++ {
		err := f(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if lim.allow() {
			log.Warn(what+" failed; retrying", "err", err, "tries", n, "suppressed", lim.suppressed())
		}
		if !outbound.Sleep(ctx, faultBackoff(100*time.Millisecond, n)) {
			return false
		}
	}
}
