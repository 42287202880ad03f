package walrelay

import (
	"context"
	"database/sql"
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
// published (publish.go) or, behind its aggregate's, held or parked
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
	fails int    // how many of its calls failed
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
