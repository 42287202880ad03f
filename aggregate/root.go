package aggregate

import (
	"github.com/heraldgo/herald/events"
)

// Aggregate is a model that holds recorded events. Embedding [Root] implements it.
type Aggregate interface {
	// AggregateRoot returns the embedded Root.
	AggregateRoot() *Root
}

// Typed is implemented by aggregates that name their own type. Without it the
// type is the GORM model's name.
type Typed interface {
	AggregateType() string
}

// Identified is implemented by aggregates that give their own id. Without it the
// id is the primary key (composite keys joined with ":").
type Identified interface {
	AggregateID() string
}

// Root records an aggregate's events until they are committed to the outbox. Embed
// it by value in a model; it has no exported fields, so GORM maps no column for it.
// Methods are not safe for concurrent use, like the model that embeds it.
type Root struct {
	pending []*Pending
}

// Pending is a recorded event waiting to be committed, with the outbox hook's
// note of which transaction last wrote it. Application code reads only Record.
type Pending struct {
	events.Record
	// Tx is the GORM connection pool (a transaction) that last wrote the event to
	// the outbox, or nil if it was never written. Set by the outbox hook.
	Tx any
	// Xid is the PostgreSQL (sub)transaction id that inserted the outbox row, as a
	// 64-bit full transaction id; 0 if never written. Set by the outbox hook.
	Xid int64
}

// AggregateRoot returns r; it makes every model embedding Root an [Aggregate].
func (r *Root) AggregateRoot() *Root { return r }

// Record records e: it takes a new UUIDv7 id and the current time, and keeps the
// event until a save commits it to the outbox.
func (r *Root) Record(e events.Event) {
	r.RecordWithMetadata(e, nil)
}

// RecordWithMetadata records e with metadata of its own, which wins over metadata
// attached to the context of the save (events.WithMetadata).
func (r *Root) RecordWithMetadata(e events.Event, md events.Metadata) {
	r.pending = append(r.pending, &Pending{Record: events.NewRecord(e, md)})
}

// Events returns the events recorded and not yet committed, oldest first.
func (r *Root) Events() []events.Event {
	out := make([]events.Event, len(r.pending))
	for i, p := range r.pending {
		out[i] = p.Event
	}
	return out
}

// Pending returns the pending events, oldest first. The slice is the Root's own:
// the outbox hook updates its entries; other code should only read it.
func (r *Root) Pending() []*Pending { return r.pending }

// Retain keeps only the pending events for which keep returns true, in order. The
// outbox hook calls it to forget events whose transaction committed.
func (r *Root) Retain(keep func(*Pending) bool) {
	kept := r.pending[:0]
	for _, p := range r.pending {
		if keep(p) {
			kept = append(kept, p)
		}
	}
	clear(r.pending[len(kept):])
	r.pending = kept
	if len(kept) == 0 {
		r.pending = nil
	}
}
