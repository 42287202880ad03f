package walrelay

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/store"
)

// The session: what one stream knows of the events it took (held, pending)
// and of the position every event before which is settled, which it
// confirms. It takes the reader's items (take): an event goes to be
// published (pipeline.go) or, behind its aggregate's, held or parked
// (park.go).

// held is an event of the stream the relay has not settled: read and not
// yet published (pending), or held: its publish failed and nothing yet
// told whether the failure is its own or the broker's, or (ordered mode) it
// waits behind such an event of its aggregate, untried, or it came while
// the broker looked down.
type held struct {
	row   store.Row
	env   events.Envelope
	msg   *message.Message // until its first publish; then made again from env
	sent  bool             // msg was given to the publisher
	lsn   store.LSN
	seq   int64  // its place in the stream: the session's count of events
	tx    int64  // the session's count of the transaction it is in
	agg   string // its aggregate's key, "" for none
	err   error  // its last failure; nil while untried
	tried time.Time
}

// message returns the message to publish h with: a new one for each
// attempt, since a publisher may keep (or still use) the one it was given.
func (h *held) message() *message.Message {
	if !h.sent {
		h.sent = true
		return h.msg
	}
	return outbound.Message(h.env)
}

// commit is the end of a transaction that committed while events of it or
// of an earlier one were held.
type commit struct {
	tx  int64
	end store.LSN
}

// session is what one stream knows: the position every event before which
// is settled (published or parked), the events held, and what the
// publisher's last calls showed.
type session struct {
	r  *Relay
	db *sql.DB // for parking
	c  *outbound.Caller

	confirmed store.LSN
	pos       atomic.Uint64 // confirmed, for the reader's status reports
	tx        int64         // transactions begun
	events    int64         // events taken
	inTx      bool
	held      []*held // in stream order
	commits   []commit
	// pending are the events taken and not yet tried, in stream order, to
	// be published together (flush); pendingAggs their aggregates
	// (ordered mode).
	pending     []*held
	pendingAggs map[string]bool

	// streak is how many calls failed since the last success; lastFailed
	// is the event of the latest. A failure alone between two successes is
	// the event's own; two or more in a row may be a broker outage.
	streak     int
	lastFailed *held
	// retryAt is when the next held event is due to be tried; round is
	// when the current pass over them, in stream order, began.
	retryAt, round time.Time
	// parked are the aggregates (ordered mode) with events in the table
	// not yet published or dead, as far as this session knows.
	parked map[string]bool
}

func aggKey(r *store.Row) string {
	if r.AggregateID == "" {
		return ""
	}
	return r.AggregateType + "\x00" + r.AggregateID
}

// begin and end follow the stream's transactions.
func (s *session) begin() { s.tx++; s.inTx = true }

func (s *session) end(lsn store.LSN) {
	s.inTx = false
	if len(s.held) == 0 && len(s.pending) == 0 && len(s.commits) == 0 {
		s.confirm(lsn)
		return
	}
	s.commits = append(s.commits, commit{tx: s.tx, end: lsn})
	s.advance()
}

// confirm moves the confirmed position to lsn.
func (s *session) confirm(lsn store.LSN) {
	s.confirmed = lsn
	s.pos.Store(uint64(lsn))
}

// idle moves the position to what the server sent, when nothing is in
// flight.
func (s *session) idle(walEnd store.LSN) {
	if !s.inTx && len(s.held) == 0 && len(s.pending) == 0 && len(s.commits) == 0 && walEnd > s.confirmed {
		s.confirm(walEnd)
	}
}

// advance confirms the commits of the transactions before the first one
// with an event held or pending.
func (s *session) advance() {
	first := int64(1<<63 - 1)
	if len(s.held) > 0 {
		first = s.held[0].tx
	}
	if len(s.pending) > 0 {
		first = min(first, s.pending[0].tx)
	}
	for len(s.commits) > 0 && s.commits[0].tx < first {
		s.confirm(s.commits[0].end)
		s.commits = s.commits[1:]
	}
}

// take handles what the reader passed on.
func (s *session) take(ctx context.Context, it item) error {
	switch it.kind {
	case itemBegin:
		s.begin()
	case itemCommit:
		s.end(it.lsn)
	case itemKeepalive:
		s.idle(it.lsn)
	case itemEvent:
		if it.ev == nil { // undecodable: the decoder logged it
			return nil
		}
		return s.event(ctx, it.ev)
	}
	return nil
}

// event takes an event of the stream: held behind its aggregate's (ordered
// mode), parked behind its aggregate's rows (ordered mode), held untried
// while the broker looks down, else pending, to be published with the
// others taken before the next flush.
func (s *session) event(ctx context.Context, h *held) error {
	s.events++
	h.seq, h.tx = s.events, s.tx
	if s.r.cfg.Ordered && h.agg != "" {
		if s.pendingAggs[h.agg] { // one event of an aggregate per call: its outcome decides the next's
			if err := s.flush(ctx); err != nil {
				return err
			}
		}
		if s.holds(h.agg) {
			s.hold(h)
			return nil
		}
		if parked, err := s.parkBehind(ctx, h); parked || err != nil {
			return err
		}
	}
	if s.streak >= 2 { // the broker looks down: the retries probe it, in order
		s.hold(h)
		return nil
	}
	s.pending = append(s.pending, h)
	if s.r.cfg.Ordered && h.agg != "" {
		s.pendingAggs[h.agg] = true
	}
	return nil
}

// hold adds h to the held events, in stream order.
func (s *session) hold(h *held) {
	i := len(s.held)
	for i > 0 && s.held[i-1].seq > h.seq {
		i--
	}
	s.held = slices.Insert(s.held, i, h)
}

// holds reports whether an event of the aggregate agg is held.
func (s *session) holds(agg string) bool {
	for _, h := range s.held {
		if h.agg == agg {
			return true
		}
	}
	return false
}

func (s *session) isHeld(h *held) bool {
	for _, o := range s.held {
		if o == h {
			return true
		}
	}
	return false
}

// remove drops items from the held events.
func (s *session) remove(items []*held) {
	gone := make(map[*held]bool, len(items))
	for _, h := range items {
		gone[h] = true
	}
	kept := s.held[:0]
	for _, h := range s.held {
		if !gone[h] {
			kept = append(kept, h)
		}
	}
	clear(s.held[len(kept):])
	s.held = kept
	s.advance()
}

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

// retry tries the next held event of the pass, in stream order: the first
// of its aggregate in ordered mode, any in the other.
func (s *session) retry(ctx context.Context) error {
	for range 2 {
		seen := map[string]bool{}
		for _, h := range s.held {
			if s.r.cfg.Ordered && h.agg != "" {
				if seen[h.agg] {
					continue
				}
				seen[h.agg] = true
			}
			if h.tried.Before(s.round) {
				return s.try(ctx, h, true)
			}
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

// Parking: the events the broker refuses (and, in ordered mode, the later
// events of their aggregates) written as rows of the outbox table
// (Config.Table), where a table relay retries and dead-letters them; once
// written they are settled.

// loadParked reads which aggregates have pending events in the table
// (ordered mode), parked by an earlier session or another relay.
func (s *session) loadParked(ctx context.Context) error {
	s.parked = map[string]bool{}
	if !s.r.cfg.Ordered {
		return nil
	}
	aggs, err := s.r.parking.PendingAggregates(ctx, s.db)
	if err != nil {
		return fmt.Errorf("walrelay: read pending aggregates: %w", err)
	}
	for _, a := range aggs {
		s.parked[a.Type+"\x00"+a.ID] = true
	}
	return nil
}

// parkBehind parks h (ordered mode) when its aggregate has events in the
// table not yet published or dead, reporting whether it did; an aggregate
// with none left there is forgotten: its events flow from the WAL again.
func (s *session) parkBehind(ctx context.Context, h *held) (bool, error) {
	if !s.parked[h.agg] {
		return false, nil
	}
	pending, err := s.r.parking.AggregatePending(ctx, s.db, store.Aggregate{Type: h.row.AggregateType, ID: h.row.AggregateID})
	if err != nil {
		return false, fmt.Errorf("walrelay: read parked events of %s %s: %w", h.row.AggregateType, h.row.AggregateID, err)
	}
	if pending {
		return true, s.park(ctx, []*held{h})
	}
	delete(s.parked, h.agg) // its events flow from the WAL again
	return false, nil
}

// parkWith parks h and, in ordered mode, the held events of its aggregate
// behind it.
func (s *session) parkWith(ctx context.Context, h *held) error {
	items := []*held{h}
	if s.r.cfg.Ordered && h.agg != "" {
		for _, o := range s.held {
			if o != h && o.agg == h.agg {
				items = append(items, o)
			}
		}
	}
	return s.park(ctx, items)
}

// park writes items, in order, as rows of the outbox table, each that
// failed with its attempt and last error, in one transaction; once it
// committed they are settled.
func (s *session) park(ctx context.Context, items []*held) error {
	rows := make([]store.Row, len(items))
	var fails []store.Failure
	for i, h := range items {
		rows[i] = h.row
		if h.err != nil {
			// A confirmed failure (a strike), due at once: the table
			// relay's backoff applies from its first retry.
			fails = append(fails, store.Failure{ID: h.row.ID, Err: store.LastError(h.err), Strike: true})
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("walrelay: park: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, _, err := s.r.outbox.Insert(ctx, tx, rows, false); err != nil {
		return fmt.Errorf("walrelay: park: insert: %w", err)
	}
	if len(fails) > 0 {
		if err := s.r.parking.MarkFailed(ctx, tx, fails); err != nil {
			return fmt.Errorf("walrelay: park: mark failed: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("walrelay: park: commit: %w", err)
	}
	s.r.m.parked(len(items))
	s.remove(items)
	if s.r.cfg.Ordered {
		for _, h := range items {
			if h.agg != "" {
				s.parked[h.agg] = true
			}
		}
	}
	s.advance()
	return nil
}
