package aggregate

import (
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/recorded"
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
// id is the primary key (composite keys joined with ":"). An Identified
// aggregate whose AggregateID is empty when it is saved with pending events
// fails the save (outboxhook.ErrEmptyAggregateID).
type Identified interface {
	AggregateID() string
}

// Root records an aggregate's events until they are committed to the outbox. Embed
// it by value in a model; it has no exported fields, so GORM maps no column for it.
// Methods are not safe for concurrent use, like the model that embeds it.
//
// A model copied by value (batch := []Order{*o}) shares the events recorded so
// far with its original: whichever of the two is saved writes them, once, and
// the other forgets them when it is saved next. Events recorded after the copy
// belong to the value they were recorded on.
type Root struct {
	list recorded.List
}

func init() {
	recorded.Of = func(r any) *recorded.List { return &r.(*Root).list }
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
	r.list.Add(events.NewRecord(e, md))
}

// Schedule records e to be published when s says (events.At, events.After),
// not at the commit: it is saved with the aggregate's write like any event,
// and the relay publishes it once it is due by the database's clock. The
// record's Schedule (Records) carries s. Until it is due, outboxhook's Cancel
// and Move (by the record's id) or CancelKey and MoveKey (by s.Key) change it
// in the transaction that decides it.
func (r *Root) Schedule(e events.Event, s events.Schedule) {
	rec := events.NewRecord(e, nil)
	rec.Schedule = s
	r.list.Add(rec)
}

// Events returns the events recorded and not yet committed, oldest first.
func (r *Root) Events() []events.Event {
	recs := r.list.Records()
	out := make([]events.Event, len(recs))
	for i, rec := range recs {
		out[i] = rec.Event
	}
	return out
}

// Records returns the events recorded and not yet committed with their ids,
// times and metadata, oldest first. The id of a record is the id of the event
// in the outbox and of the message the relay publishes.
func (r *Root) Records() []events.Record { return r.list.Records() }
