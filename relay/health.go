package relay

import (
	"context"
	"sync"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// health is what this instance's own batches showed about the publisher, for
// the outage recovery. An outage is a streak of at least two batches in a row
// in which something failed and nothing was published, one of whose failures
// was an event's first attempt (a streak of retries alone is what a refused
// topic or a poison event looks like under light traffic, not an outage). The
// first batch that publishes after an outage opens a recovery: from then on,
// each topic and event type seen published again has the retries of its events
// that failed since the outage began made due at once, instead of waiting out
// backoffs that grew while the broker was away. Only the database's clock is
// used for "since", only this process's monotonic clock for "how long"; the
// two are never compared.
type health struct {
	mu     sync.Mutex
	streak int       // batches in a row that failed and published nothing
	fresh  bool      // a failure of the streak was an event's first attempt
	since  time.Time // database time of the streak's earliest failure mark
	rec    *recovery // open after an outage, until it expires
}

// recovery follows an outage: the topics and types already made due, and
// when it closes (MaxBackoff after it opened: by then every retry scheduled
// during the outage is due anyway).
type recovery struct {
	since  time.Time // database time: failures at or after it happened in the outage
	closes time.Time // monotonic
	done   map[topicType]bool
}

// topicType is the key the outage recovery makes retries due by.
type topicType struct{ topic, typ string }

// maxRecoveryKeys bounds the topics and types one recovery remembers; beyond
// it, later ones wait out their backoffs.
const maxRecoveryKeys = 10000

// observe takes a batch's outcome into the streak. It returns the database
// time since which failed events are outage victims and the topics and types
// whose victims are to be made due now (none, mostly).
func (h *health) observe(out *outcome, now time.Time, window time.Duration) (time.Time, []topicType) {
	h.mu.Lock()
	defer h.mu.Unlock()
	failed, first := out.publishFailures()
	if len(out.ok) == 0 {
		if failed {
			h.streak++
			h.fresh = h.fresh || first
			if !out.failedAt.IsZero() && (h.since.IsZero() || out.failedAt.Before(h.since)) {
				h.since = out.failedAt
			}
		}
		return time.Time{}, nil
	}
	if h.streak >= 2 && h.fresh && !h.since.IsZero() {
		h.rec = &recovery{since: h.since, closes: now.Add(window), done: map[topicType]bool{}}
	}
	h.streak, h.fresh, h.since = 0, false, time.Time{}
	if h.rec == nil {
		return time.Time{}, nil
	}
	if now.After(h.rec.closes) {
		h.rec = nil
		return time.Time{}, nil
	}
	var keys []topicType
	for _, rw := range out.ok {
		k := topicType{rw.Topic, rw.Type}
		if !h.rec.done[k] && len(h.rec.done) < maxRecoveryKeys {
			h.rec.done[k] = true
			keys = append(keys, k)
		}
	}
	return h.rec.since, keys
}

// forget undoes observe's bookkeeping of keys whose retries could not be made
// due, so that a later batch tries again.
func (h *health) forget(since time.Time, keys []topicType) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rec == nil || !h.rec.since.Equal(since) {
		return
	}
	for _, k := range keys {
		delete(h.rec.done, k)
	}
}

// recoverOutage makes due now the retries the outage recovery calls for after
// this batch (see health). A failure only costs latency: the events wait out
// their backoffs.
func (r *Relay) recoverOutage(ctx context.Context, out *outcome, all *store.Fence) {
	since, keys := r.health.observe(out, time.Now(), r.cfg.MaxBackoff)
	if len(keys) == 0 {
		return
	}
	topics, types := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		topics[i], types[i] = k.topic, k.typ
	}
	n, err := r.st.RecoverOutage(ctx, r.db, store.Recovery{Since: since, Topics: topics, Types: types, Fence: all})
	if err != nil {
		r.health.forget(since, keys)
		r.log.Warn("publisher back after an outage; could not make waiting retries due", "err", err)
		return
	}
	if n > 0 {
		r.log.Info("publisher back after an outage; waiting retries are due now", "events", n, "topics", topics)
	}
}
