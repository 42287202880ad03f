package events

import (
	"time"
)

// MetaDueAt is the metadata key of a scheduled event's due time, in RFC 3339
// with microseconds, UTC: the time the database computed when the event was
// saved (or last moved), not before which the relay published it.
const MetaDueAt = "herald_due_at"

// Schedule says when a scheduled event is published: not before At, or, when
// At is zero, not before After has passed since its save, both judged by the
// database's clock (never the relay's). The zero Schedule publishes at once.
// A time already past publishes at once.
type Schedule struct {
	// At is the earliest time the event is published.
	At time.Time
	// After is, when At is zero, how long after the save the event is due.
	After time.Duration
	// Key is the caller's name for the event ("reminder:order-42"), by which
	// it can be cancelled or moved without storing its id (outboxhook's
	// CancelKey and MoveKey). Keys need not be unique: a key names every
	// scheduled event saved under it. At most 255 characters; "" for none.
	Key string
	// Apart, for a relay in ordered mode, publishes the event when it is
	// due, apart from its aggregate's order: it neither waits behind the
	// aggregate's earlier events nor holds its later ones back. Without it
	// the event keeps its place in line: the aggregate's later events wait
	// behind it until it is published. Unordered relays ignore it. Apart
	// events carry their aggregate in their metadata only.
	Apart bool
}

// At returns a Schedule due at t.
func At(t time.Time) Schedule { return Schedule{At: t} }

// After returns a Schedule due d after the save.
func After(d time.Duration) Schedule { return Schedule{After: d} }

// Keyed returns s under key (see Schedule.Key).
func (s Schedule) Keyed(key string) Schedule {
	s.Key = key
	return s
}

// Detached returns s with Apart set (see Schedule.Apart).
func (s Schedule) Detached() Schedule {
	s.Apart = true
	return s
}

// IsZero reports whether s is the zero Schedule: an event published at once.
func (s Schedule) IsZero() bool { return s == Schedule{} }

// DueAt returns the due time a message's metadata carries (MetaDueAt), and
// false for an event that was not scheduled.
func DueAt(md map[string]string) (time.Time, bool) {
	v, ok := md[MetaDueAt]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}
