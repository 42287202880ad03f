package store

import (
	"context"
	"time"
)

// TopicStats are one topic's figures.
type TopicStats struct {
	Topic string
	// Pending, Failing and Dead count as Stats does: events neither published
	// nor dead, those of them with a failed attempt, and dead events.
	Pending, Failing, Dead int64
	// OldestPending is the age of the topic's oldest pending event, by the
	// database's clock (since its insert or its last requeue, as Stats; a
	// requeue resets created_at); 0 when none is pending. A scheduled event
	// counts only once due, and from its due time (or a later requeue): one
	// that waits for its time is not late.
	OldestPending time.Duration
	// PublishedLastMinute counts the published events kept for the retention
	// (processed_at set) that were published within the last minute, by the
	// database's clock. Without a retention published rows are deleted and it
	// is 0.
	PublishedLastMinute int64
}

// DeadFilter picks dead events; its conditions are ANDed, and the zero filter
// picks every dead event.
type DeadFilter struct {
	// IDs: only these events, when not empty.
	IDs []string
	// Type: only events of this type, when not empty.
	Type string
	// OlderThan: only events that died more than this long ago (by the
	// database's clock), when > 0.
	OlderThan time.Duration
}

// FailingFilter picks failing events: pending (neither published nor dead)
// with at least one failed attempt. The zero filter picks them all.
type FailingFilter struct {
	// Type: only events of this type, when not empty.
	Type string
}

// FailureGroup is the failing events of one type whose last attempt failed
// with the same error.
type FailureGroup struct {
	Type, LastError string
	// Events counts them; MaxAttempts is the most failed attempts of one.
	Events      int64
	MaxAttempts int
	// NextAttemptAt is the soonest next attempt (available_at) of one of
	// them; LastFailedAt the latest failure (zero when none was recorded).
	NextAttemptAt, LastFailedAt time.Time
}

// ScheduledParams say which scheduled events Admin.FindScheduled lists.
type ScheduledParams struct {
	// Limit is the most it lists.
	Limit int
	// Overdue: only the scheduled events already due by the database's
	// clock (and still neither published nor dead), not those waiting.
	Overdue bool
}

// Admin is what the people on call do on one outbox table (the herald command
// and the admin page), beside Relay.Stats. The writes run in a transaction of
// their own, begun on db as suits the database (MySQL: READ COMMITTED, so
// that they take no gap locks and pass over the rows relays have claimed
// instead of waiting for them). A requeue makes a dead event pending again:
// its attempts and strikes cleared, due now, its age (Stats, Topics) counted
// from the requeue.
type Admin interface {
	// Topics returns the figures of every topic that has pending or dead
	// events, or events published within the last minute that the retention
	// keeps, in topic order.
	Topics(ctx context.Context, x Execer) ([]TopicStats, error)
	// RetainsPublished reports whether the table keeps published events
	// (some row has processed_at set): only then does
	// TopicStats.PublishedLastMinute count anything.
	RetainsPublished(ctx context.Context, x Execer) (bool, error)
	// FindDead lists up to limit dead events f picks, oldest death first.
	FindDead(ctx context.Context, x Execer, f DeadFilter, limit int) ([]Row, error)
	// FindFailing lists up to limit failing events f picks, soonest next
	// attempt first, with Row.LastError, LastFailedAt and NextAttemptAt.
	FindFailing(ctx context.Context, x Execer, f FailingFilter, limit int) ([]Row, error)
	// FailingGroups returns up to limit groups of the failing events f
	// picks, by type and last error, the largest group first (then by type
	// and error).
	FailingGroups(ctx context.Context, x Execer, f FailingFilter, limit int) ([]FailureGroup, error)
	// FindScheduled lists up to p.Limit scheduled events (due_at set) that
	// are neither published nor dead, soonest due first (then in insert
	// order), through the scheduled index, without their payloads and
	// metadata: Row.Schedule.At is the event's due time (UTC) and
	// Row.Schedule.Key its key, with Row.Attempts and Row.LastError (an
	// overdue event may have failed).
	FindScheduled(ctx context.Context, x Execer, p ScheduledParams) ([]Row, error)
	// RequeueIDs makes the dead events ids pending again in one
	// transaction, all of them or, when some id is not a dead event, none:
	// it then returns those ids.
	RequeueIDs(ctx context.Context, db DB, ids []string) (notDead []string, err error)
	// RequeueType makes every dead event of type typ pending again and
	// returns how many.
	RequeueType(ctx context.Context, db DB, typ string) (int64, error)
	// RequeueAll makes every dead event pending again and returns how many.
	RequeueAll(ctx context.Context, db DB) (int64, error)
	// PurgeDead deletes up to limit dead events that died more than olderThan
	// ago (by the database's clock) and returns how many. It never touches
	// pending or published events.
	PurgeDead(ctx context.Context, db DB, olderThan time.Duration, limit int) (int64, error)
}
