package store

import (
	"time"

	"github.com/heraldgo/herald/events"
)

// MetaDueAt is the metadata key under which Insert and Reschedule store a
// scheduled event's due time (RFC 3339, microseconds, UTC, computed by the
// database).
const MetaDueAt = events.MetaDueAt

// Schedule says when an event comes due: not before At, or, when At is zero,
// After past its insert by the database's clock. The zero Schedule is an
// event due at once. An event due before its insert is due at its insert
// (its due_at keeps At).
type Schedule struct {
	At    time.Time
	After time.Duration
	// Key is the caller's name for the event ("reminder:order-42"), by which
	// Reschedule finds it; "" for none. Keys are not unique.
	Key string
}

// IsZero reports whether s schedules nothing.
func (s Schedule) IsZero() bool { return s.At.IsZero() && s.After <= 0 && s.Key == "" }

// RescheduleParams say what Outbox.Reschedule changes: the scheduled event
// ID, or every scheduled event of Key (one of the two), cancelled (deleted)
// or moved to come due at To (To's Key is ignored; the zero To: due now).
type RescheduleParams struct {
	ID     string
	Key    string
	Cancel bool
	To     Schedule
}

// RescheduleResult is what Reschedule found of the events it named:
// Changed, not due yet, were cancelled or moved; Due are due and unpublished
// (being published, or waiting for a retry: too late to change); Published
// were published; Dead were dead-lettered. An event that does not exist (or
// was deleted by retention) is in none of them.
type RescheduleResult struct {
	Changed, Due, Published, Dead int64
}
