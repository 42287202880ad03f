package aggregate

import (
	"github.com/google/uuid"

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

// Root records an aggregate's events, and its cancels and moves of scheduled
// events, until they are committed to the outbox. Embed
// it by value in a model; it has no exported fields, so GORM maps no column for it.
// Methods are not safe for concurrent use, like the model that embeds it.
//
// A model copied by value (batch := []Order{*o}) shares the events (and
// cancels and moves) recorded so far with its original: whichever of the two
// is saved writes them, once, and the other forgets them when it is saved
// next. Those recorded after the copy belong to the value they were recorded
// on.
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
// record's Schedule (Records) carries s. Until it is due, a later method of
// the aggregate cancels or moves it ([Root.CancelKey], [Root.Cancel] with the
// record's id, [Root.MoveKey], [Root.Move]), as do outboxhook's functions of
// the same names in a transaction of the caller's.
func (r *Root) Schedule(e events.Event, s events.Schedule) {
	rec := events.NewRecord(e, nil)
	rec.Schedule = s
	r.list.Add(rec)
}

// Reschedule is a cancel or a move of scheduled events recorded on an
// aggregate ([Root.Cancel], [Root.CancelKey], [Root.Move], [Root.MoveKey]).
type Reschedule struct {
	ID     uuid.UUID       // the event's id, for a change by id; uuid.Nil for one by key
	Key    string          // the key, for a change by key; "" for one by id
	Cancel bool            // a cancel; otherwise a move to To
	To     events.Schedule // a move's new due time (the zero Schedule: now); its Key and Apart are ignored
}

// Rescheduled is what a committed [Reschedule] did, counted over the
// scheduled events it named (at most one for a change by id): Changed were
// cancelled or moved (they were not due yet); the others could not be: Due
// (being published, or waiting for a retry), Published, Dead. All four are
// zero when it named no scheduled event (see [Rescheduled.Unknown]).
type Rescheduled struct {
	Reschedule
	Changed, Due, Published, Dead int64
}

// Unknown reports whether the change found no scheduled event by its id or
// key: never saved, saved unscheduled, already cancelled, or published and
// deleted (a relay without retention deletes what it publishes).
func (r Rescheduled) Unknown() bool {
	return r.Changed == 0 && r.Due == 0 && r.Published == 0 && r.Dead == 0
}

// Cancel records the cancel of the scheduled event id (a record's id,
// Records): the outbox hook applies it in the transaction of the
// aggregate's next save, in the order recorded relative to the aggregate's
// events, and the event is never published if that transaction commits
// before it is due. Like an event, it stays pending while no save of the
// aggregate commits (a rollback, a save that wrote no row) and is applied
// again by the next. What it did is known after the commit ([Root.Rescheduled]);
// an event it could not cancel (published, due, dead, unknown) does not fail
// the save unless the save's context asks (outboxhook.RequireRescheduled).
// uuid.Nil records nothing.
func (r *Root) Cancel(id uuid.UUID) {
	if id != uuid.Nil {
		r.list.AddChange(recorded.Change{ID: id, Cancel: true})
	}
}

// CancelKey records the cancel of every scheduled event saved under key, as
// [Root.Cancel] does for one event; a Schedule of the key recorded before it
// in the same save is cancelled too. "" records nothing.
func (r *Root) CancelKey(key string) {
	if key != "" {
		r.list.AddChange(recorded.Change{Key: key, Cancel: true})
	}
}

// Move records the move of the scheduled event id to come due when to says
// (the zero Schedule: now; to's Key and Apart are ignored), applied as
// [Root.Cancel] is. uuid.Nil records nothing.
func (r *Root) Move(id uuid.UUID, to events.Schedule) {
	if id != uuid.Nil {
		r.list.AddChange(recorded.Change{ID: id, To: to})
	}
}

// MoveKey records the move of every scheduled event saved under key to come
// due when to says, applied as [Root.Cancel] is. "" records nothing.
func (r *Root) MoveKey(key string, to events.Schedule) {
	if key != "" {
		r.list.AddChange(recorded.Change{Key: key, To: to})
	}
}

// Reschedules returns the cancels and moves recorded and not yet committed,
// oldest first.
func (r *Root) Reschedules() []Reschedule {
	cs := r.list.Changes(false)
	out := make([]Reschedule, len(cs))
	for i, c := range cs {
		out[i] = Reschedule{ID: c.ID, Key: c.Key, Cancel: c.Cancel, To: c.To}
	}
	return out
}

// Rescheduled returns what the cancels and moves recorded on the aggregate
// did, once the transaction of the save that applied them committed, oldest
// first. They are kept until the aggregate's next save begins (which forgets
// them whether it commits or not): read them after the commit. Nil when no
// cancel or move committed since.
func (r *Root) Rescheduled() []Rescheduled {
	cs := r.list.Changes(true)
	if len(cs) == 0 {
		return nil
	}
	out := make([]Rescheduled, len(cs))
	for i, c := range cs {
		out[i] = Rescheduled{
			Reschedule: Reschedule{ID: c.ID, Key: c.Key, Cancel: c.Cancel, To: c.To},
			Changed:    c.Changed, Due: c.Due, Published: c.Published, Dead: c.Dead,
		}
	}
	return out
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
