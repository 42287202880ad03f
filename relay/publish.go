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
// With ordered set, the first failure stops the run: the rest are not tried.
func (r *Relay) publishRun(ctx context.Context, rows []*row, ordered bool) []error {
	errs := make([]error, len(rows))
	msgs := make([]*message.Message, 0, len(rows))
	for _, rw := range rows {
		msgs = append(msgs, rw.msg)
	}
	if err := r.publish(ctx, rows[0].topic, msgs); err == nil || len(rows) == 1 {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, rw := range rows {
		errs[i] = r.publish(ctx, rw.topic, []*message.Message{rw.msg.Copy()})
		if errs[i] != nil && ordered {
			for j := i + 1; j < len(rows); j++ {
				errs[j] = errSkipped
			}
			break
		}
	}
	return errs
}

// errSkipped marks an event held back behind a failed earlier event of its
// aggregate, and errNotTried one whose batch ran out of time before its turn:
// neither is published nor counted as an attempt; both stay pending.
var (
	errSkipped  = errors.New("held back behind an earlier failed event")
	errNotTried = errors.New("batch out of time before this event's turn")
)

// publishUnordered publishes a batch: per topic, in chunks spread over
// PublishConcurrency workers.
func (r *Relay) publishUnordered(ctx context.Context, rows []*row) *outcome {
	start := time.Now()
	out := &outcome{}
	var (
		units   [][]*row
		byTopic = map[string][]*row{}
		order   []string
	)
	for _, rw := range rows {
		if rw.err != nil {
			out.add(rw, rw.err)
			continue
		}
		if _, ok := byTopic[rw.topic]; !ok {
			order = append(order, rw.topic)
		}
		byTopic[rw.topic] = append(byTopic[rw.topic], rw)
	}
	for _, t := range order {
		units = append(units, chunk(byTopic[t], r.cfg.PublishConcurrency)...)
	}
	r.runUnits(ctx, units, false, out)
	out.took = time.Since(start)
	return out
}

// chunk splits rows into at most n chunks of similar size.
func chunk(rows []*row, n int) [][]*row {
	size := (len(rows) + n - 1) / n
	size = max(size, 64)
	var out [][]*row
	for len(rows) > 0 {
		k := min(size, len(rows))
		out = append(out, rows[:k])
		rows = rows[k:]
	}
	return out
}

// runUnits publishes each unit (a sequence of rows) on a pool of workers. Within
// a unit rows go in order, consecutive rows of one topic in one call.
func (r *Relay) runUnits(ctx context.Context, units [][]*row, ordered bool, out *outcome) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next = make(chan []*row)
	)
	workers := min(r.cfg.PublishConcurrency, len(units))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for unit := range next {
				results := make([]error, 0, len(unit))
				for i := 0; i < len(unit); {
					j := i + 1
					for j < len(unit) && unit[j].topic == unit[i].topic {
						j++
					}
					errs := r.publishRun(ctx, unit[i:j], ordered)
					results = append(results, errs...)
					i = j
					if ordered && errs[len(errs)-1] != nil && errs[len(errs)-1] != errNotTried {
						for ; i < len(unit); i++ {
							results = append(results, errSkipped)
						}
					}
				}
				mu.Lock()
				for i, rw := range unit {
					if results[i] != errSkipped && results[i] != errNotTried {
						out.add(rw, results[i])
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, u := range units {
		next <- u
	}
	close(next)
	wg.Wait()
}
