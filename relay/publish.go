package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
)

// Errors a publish can fail with, recorded in last_error.
var (
	// ErrPublishTimeout is a Publish call that did not return within PublishTimeout.
	ErrPublishTimeout = errors.New("relay: publish timed out")
	// ErrPublisherPanic is a Publish call that panicked.
	ErrPublisherPanic = errors.New("relay: publisher panicked")
	// ErrUndecodable is a row whose id or metadata cannot be read; it goes dead
	// at once, since no retry can fix it.
	ErrUndecodable = errors.New("relay: stored event cannot be decoded")
)

// row is a claimed outbox row.
type row struct {
	id, typ, aggType, aggID, topic string
	version, attempts              int
	payload, metadata              []byte
	occurred                       time.Time
	seq                            int64
	msg                            *message.Message
	err                            error // set when the row cannot become a message
}

func claim(ctx context.Context, tx execer, query string, args ...any) ([]*row, error) {
	rs, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer rs.Close()
	var out []*row
	for rs.Next() {
		r := &row{}
		if err := rs.Scan(&r.id, &r.typ, &r.version, &r.aggType, &r.aggID, &r.topic, &r.payload, &r.metadata, &r.occurred, &r.attempts); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		r.msg, r.err = toMessage(r)
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return out, nil
}

// toMessage builds the Watermill message of a row: its UUID is the event id.
func toMessage(r *row) (*message.Message, error) {
	id, err := uuid.Parse(r.id)
	if err != nil {
		return nil, fmt.Errorf("%w: id %q: %v", ErrUndecodable, r.id, err)
	}
	var md events.Metadata
	if len(r.metadata) > 0 {
		if err := json.Unmarshal(r.metadata, &md); err != nil {
			return nil, fmt.Errorf("%w: metadata of %s: %v", ErrUndecodable, r.id, err)
		}
	}
	return events.NewMessage(events.Envelope{
		ID: id, Type: r.typ, Version: r.version, AggregateType: r.aggType, AggregateID: r.aggID,
		Topic: r.topic, OccurredAt: r.occurred, Payload: r.payload, Metadata: md,
	}), nil
}

// publish calls the publisher with a timeout of PublishTimeout, turning a panic
// into an error. startBy is the batch's start-by context: once it is done, no
// call starts (errNotTried), so a batch ends within PublishTimeout of it. A
// publisher that never returns leaves its goroutine behind: nothing can stop it.
func (r *Relay) publish(startBy context.Context, topic string, msgs []*message.Message) error {
	if startBy.Err() != nil {
		return errNotTried
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(startBy), r.cfg.PublishTimeout)
	defer cancel()
	for _, m := range msgs {
		m.SetContext(pctx)
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("%w: %v", ErrPublisherPanic, p)
			}
		}()
		done <- r.pub.Publish(topic, msgs...)
	}()
	select {
	case err := <-done:
		return err
	case <-pctx.Done():
		return fmt.Errorf("%w after %v", ErrPublishTimeout, r.cfg.PublishTimeout)
	}
}

// publishRun publishes rows (one topic) in one call; if that fails, one by one,
// so that a bad message does not fail its neighbours. It returns each row's error.
func (r *Relay) publishRun(startBy context.Context, rows []*row) []error {
	errs := make([]error, len(rows))
	msgs := make([]*message.Message, 0, len(rows))
	for _, rw := range rows {
		msgs = append(msgs, rw.msg)
	}
	if err := r.publish(startBy, rows[0].topic, msgs); err == nil || len(rows) == 1 {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, rw := range rows {
		errs[i] = r.publish(startBy, rw.topic, []*message.Message{rw.msg.Copy()})
	}
	return errs
}

// errNotTried marks an event whose batch ran out of time before its turn: it is
// neither published nor counted as an attempt, and stays pending.
var errNotTried = errors.New("batch out of time before this event's turn")

// publishSet publishes rows in no particular order: per topic, in chunks spread
// over PublishConcurrency workers. It returns each row's error.
func (r *Relay) publishSet(startBy context.Context, rows []*row) []error {
	errs := make([]error, len(rows))
	var (
		chunks  [][]int
		byTopic = map[string][]int{}
		topics  []string
	)
	for i, rw := range rows {
		if _, ok := byTopic[rw.topic]; !ok {
			topics = append(topics, rw.topic)
		}
		byTopic[rw.topic] = append(byTopic[rw.topic], i)
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
				for k, err := range r.publishRun(startBy, run) {
					errs[idx[k]] = err // each index is written by one worker only
				}
			}
		}()
	}
	for _, c := range chunks {
		next <- c
	}
	close(next)
	wg.Wait()
	return errs
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
			out.add(rw, rw.err) // cannot become a message: dead at once
		} else {
			ok = append(ok, rw)
		}
	}
	for i, err := range r.publishSet(startBy, ok) {
		if err != errNotTried {
			out.add(ok[i], err)
		}
	}
	out.took = time.Since(start)
	return out
}

// publishOrdered publishes units (each the events of one aggregate, in commit
// order) layer by layer: the first event of every unit, all at once, then the
// second, and so on, adding the results to out. A unit whose event failed (or
// was not tried) publishes nothing more in this batch: its later events are held
// back, unmarked.
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
		for j, err := range r.publishSet(startBy, rows) {
			if err != nil {
				stopped[owner[j]] = true
			}
			if err != errNotTried {
				out.add(rows[j], err)
			}
		}
	}
	out.took = time.Since(start)
}
