// Package recorded holds what an aggregate.Root keeps of its events (and of
// the cancels and moves of scheduled events its methods record), and what the
// outbox hook notes about them, out of the aggregate package's public API.
//
// A Root keeps a List of Entries, events and changes in the order recorded. An Entry is shared, not copied, when the
// model that embeds the Root is copied by value: the copy's List clones its
// slice before it changes it (so the two never write into one backing array),
// and whatever the hook learns of an entry (its transaction committed) is
// seen through both. So a copy and its original write each event once between
// them, whichever is saved.
package recorded

import (
	"slices"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
)

// Entry is one recorded event, or one recorded cancel or move (Change), and
// its fate.
type Entry struct {
	Record    events.Record // the event; zero for a change
	Change    *Change       // the cancel or move; nil for an event
	committed atomic.Bool

	// Unobserved is set by the outbox hook when the entry was written in a
	// transaction whose end the hook cannot see (a pool it does not wrap): the
	// pool it was written through, and a database-specific token that tells
	// later whether that transaction committed. Nil when not so written.
	Unobserved *Unobserved
}

// Unobserved is where an entry was written when its transaction's end could
// not be seen.
type Unobserved struct {
	Pool  any
	Token int64
}

// Change is a cancel or a move of scheduled events recorded on an aggregate,
// by the event's id or by a key, and what the hook found when it applied it.
type Change struct {
	ID     uuid.UUID       // the event, for a change by id
	Key    string          // the key, for a change by key
	Cancel bool            // a cancel; else a move to To
	To     events.Schedule // a move's new schedule

	// Set by the outbox hook each time it applies the change, in the
	// transaction of a save: what the change did (Changed) and found of the
	// events it could not change.
	Changed, Due, Published, Dead int64
}

// Committed reports whether a transaction that wrote the entry committed.
func (e *Entry) Committed() bool { return e.committed.Load() }

// MarkCommitted records that a transaction that wrote the entry committed.
func (e *Entry) MarkCommitted() { e.committed.Store(true) }

// List is a Root's entries, oldest first. The zero value is empty.
type List struct {
	entries []*Entry
	owner   *List // the List that owns entries' backing array; another value after a copy
}

// own gives l a backing array of its own if l is a copy of another List.
func (l *List) own() {
	if l.owner != l {
		l.entries = slices.Clone(l.entries)
		l.owner = l
	}
}

// Add appends a new entry for rec.
func (l *List) Add(rec events.Record) {
	l.own()
	l.entries = append(l.entries, &Entry{Record: rec})
}

// AddChange appends a new entry for the cancel or move c.
func (l *List) AddChange(c Change) {
	l.own()
	l.entries = append(l.entries, &Entry{Change: &c})
}

// Pending drops committed entries and returns the rest, oldest first. The
// slice is l's own until its next change; callers only read it.
func (l *List) Pending() []*Entry {
	if !slices.ContainsFunc(l.entries, (*Entry).Committed) {
		return l.entries
	}
	l.own()
	l.entries = slices.DeleteFunc(l.entries, (*Entry).Committed)
	if len(l.entries) == 0 {
		l.entries = nil
	}
	return l.entries
}

// Records returns the records of the events not committed, oldest first.
func (l *List) Records() []events.Record {
	out := make([]events.Record, 0, len(l.entries))
	for _, e := range l.entries {
		if e.Change == nil && !e.Committed() {
			out = append(out, e.Record)
		}
	}
	return out
}

// Changes returns the changes not committed (committed false) or committed
// and not yet dropped by Pending (committed true), oldest first.
func (l *List) Changes(committed bool) []Change {
	var out []Change
	for _, e := range l.entries {
		if e.Change != nil && e.Committed() == committed {
			out = append(out, *e.Change)
		}
	}
	return out
}

// Of returns the List of the aggregate root r (an *aggregate.Root). It is set
// by package aggregate, which the outbox hook imports, so it is set before use.
var Of func(r any) *List
