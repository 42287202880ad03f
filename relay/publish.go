package relay

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/relayhook"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/publish"
)

// Errors a publish can fail with, recorded in last_error.
var (
	// ErrPublishTimeout is [publish.ErrPublishTimeout].
	ErrPublishTimeout = publish.ErrPublishTimeout
	// ErrPublisherPanic is [publish.ErrPublisherPanic].
	ErrPublisherPanic = publish.ErrPublisherPanic
	// ErrUndecodable is a row whose id or metadata cannot be read; it goes dead
	// at once, since no retry can fix it.
	ErrUndecodable = outbound.ErrUndecodable
	// ErrRejected is [publish.ErrRejected]: what a publisher's error for one
	// message wraps when the broker refused that message itself.
	ErrRejected = publish.ErrRejected
)

// row is a claimed outbox row, ready to publish.
type row struct {
	store.Row
	msg *message.Message
	err error // set when the row cannot become a message
}

// toRows makes claimed rows ready to publish: each with its message (with
// the tenant's key, events.MetaTenant, unless tenant is empty), or the reason
// it cannot have one.
func toRows(claimed []store.Row, tenant string) []*row {
	out := make([]*row, len(claimed))
	for i := range claimed {
		r := &row{Row: claimed[i]}
		var env events.Envelope
		if env, r.err = outbound.Envelope(&r.Row); r.err == nil {
			r.msg = outbound.Message(env)
			if tenant != "" {
				r.msg.Metadata.Set(events.MetaTenant, tenant)
			}
		}
		out[i] = r
	}
	return out
}

// NewMessage builds the Watermill message the relay publishes for env: its UUID
// is the event id, its payload the encoded event, and its metadata
// env.MessageMetadata() (the event's own metadata and the Herald keys, which
// win). Consumers read it back with inbox.FromMessage.
func NewMessage(env events.Envelope) *message.Message { return outbound.Message(env) }

// result is how one row's publish ended: its error (nil when published) and
// when the Publish call that decided it returned, by this process's monotonic
// clock.
type result struct {
	err error
	end time.Time
}

// Confirmer is [publish.Confirmer] (Config.Confirmer).
type Confirmer = publish.Confirmer

// BatchPublisher is [publish.BatchPublisher]: a publisher that reports a
// result per message, whose failed messages alone are retried.
type BatchPublisher = publish.BatchPublisher

// publish calls the publisher (outbound.Caller: PublishBatch when it is a
// BatchPublisher, else Publish, within PublishTimeout, a panic an error, a
// producer span per message), records in ev a call that acknowledged a
// message, and writes each message's result in res (len(msgs) long).
// startBy is the batch's start-by context: once it is done, no call starts
// (errNotTried), so a batch ends within PublishTimeout of it; a call started
// runs its course.
func (r *Relay) publish(startBy context.Context, ev *outbound.Evidence, topic string, msgs []*message.Message, res []result) {
	r.at(relayhook.Publish, nil)
	if outOfTime(startBy) {
		fill(res, result{err: errNotTried, end: time.Now()})
		return
	}
	got := r.caller.Call(context.WithoutCancel(startBy), topic, msgs)
	for i, err := range got.Errs {
		res[i] = result{err: err, end: got.End}
	}
	ev.Add(got)
}

// fill sets every result of res to rr.
func fill(res []result, rr result) {
	for i := range res {
		res[i] = rr
	}
}

// outOfTime reports whether the start-by context is done, or its deadline
// passed by the monotonic clock: a process resumed after a pause (SIGSTOP, a
// VM freeze) runs on before the context's timer has fired, and a Publish call
// started then would go out after the batch's leases passed.
func outOfTime(startBy context.Context) bool {
	if startBy.Err() != nil {
		return true
	}
	d, ok := startBy.Deadline()
	return ok && !time.Now().Before(d)
}

// publishRun publishes rows (one topic) in one call. With Publish, if that
// fails, it publishes them again one by one, so that a bad message does not
// fail its neighbours (and the neighbours published after it confirm its
// failure); a BatchPublisher's call already told which failed. It returns
// each row's result.
func (r *Relay) publishRun(startBy context.Context, ev *outbound.Evidence, rows []*row) []result {
	res := make([]result, len(rows))
	msgs := make([]*message.Message, 0, len(rows))
	for _, rw := range rows {
		msgs = append(msgs, rw.msg)
	}
	r.publish(startBy, ev, rows[0].Topic, msgs, res)
	if r.caller.Batch() || res[0].err == nil || len(rows) == 1 {
		return res
	}
	for i, rw := range rows {
		r.publish(startBy, ev, rw.Topic, []*message.Message{rw.msg.Copy()}, res[i:i+1])
	}
	return res
}

// errNotTried marks an event whose batch ran out of time before its turn: it is
// neither published nor counted as an attempt, and stays pending.
var errNotTried = errors.New("batch out of time before this event's turn")

// publishSet publishes rows in no particular order: per topic, in chunks spread
// over PublishConcurrency workers. It returns each row's result.
func (r *Relay) publishSet(startBy context.Context, ev *outbound.Evidence, rows []*row) []result {
	res := make([]result, len(rows))
	var (
		chunks  [][]int
		byTopic = map[string][]int{}
		topics  []string
	)
	for i, rw := range rows {
		if _, ok := byTopic[rw.Topic]; !ok {
			topics = append(topics, rw.Topic)
		}
		byTopic[rw.Topic] = append(byTopic[rw.Topic], i)
	}
	for _, t := range topics {
		chunks = append(chunks, chunk(byTopic[t], r.cfg.PublishConcurrency)...)
	}
	var (
		wg   sync.WaitGroup
		next = make(chan []int)
	)
	for range min(r.cfg.PublishConcurrency, len(chunks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for idx := range next {
				run := make([]*row, len(idx))
				for k, i := range idx {
					run[k] = rows[i]
				}
				for k, rr := range r.publishRun(startBy, ev, run) {
					res[idx[k]] = rr // each index is written by one worker only
				}
			}
		}()
	}
	for _, c := range chunks {
		next <- c
	}
	close(next)
	wg.Wait()
	return res
}

// chunk splits idx into at most n chunks of similar size (64 at least).
func chunk(idx []int, n int) [][]int {
	size := max((len(idx)+n-1)/n, 64)
	var out [][]int
	for len(idx) > 0 {
		k := min(size, len(idx))
		out = append(out, idx[:k])
		idx = idx[k:]
	}
	return out
}

// publishUnordered publishes a batch in no particular order.
func (r *Relay) publishUnordered(startBy context.Context, rows []*row) *outcome {
	start := time.Now()
	out := &outcome{}
	ok := make([]*row, 0, len(rows))
	for _, rw := range rows {
		if rw.err != nil {
			out.add(rw, result{err: rw.err}) // cannot become a message: dead at once
		} else {
			ok = append(ok, rw)
		}
	}
	for i, rr := range r.publishSet(startBy, &out.ev, ok) {
		if !errors.Is(rr.err, errNotTried) {
			out.add(ok[i], rr)
		}
	}
	out.took = time.Since(start)
	return out
}

// publishOrdered publishes units (each the events of one aggregate, in commit
// order) layer by layer: the first event of every unit, all at once, then the
// second, and so on, adding the results to out. A unit whose event failed (or
// was not tried) publishes nothing more in this batch: its later events are held
// back, unmarked. A success in a later layer confirms the failures of the
// earlier ones (see outbound.Evidence).
func (r *Relay) publishOrdered(startBy context.Context, units [][]*row, out *outcome) {
	start := time.Now()
	stopped := make([]bool, len(units))
	for layer := 0; ; layer++ {
		var (
			rows  []*row
			owner []int
		)
		for i, u := range units {
			if !stopped[i] && layer < len(u) {
				rows = append(rows, u[layer])
				owner = append(owner, i)
			}
		}
		if len(rows) == 0 {
			break
		}
		for j, rr := range r.publishSet(startBy, &out.ev, rows) {
			if rr.err != nil {
				stopped[owner[j]] = true
			}
			if !errors.Is(rr.err, errNotTried) {
				out.add(rows[j], rr)
			}
		}
	}
	out.took = time.Since(start)
}
