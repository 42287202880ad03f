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

// DeadBrief is a dead event as the grouping of dead events reads it: no
// payload, no metadata.
type DeadBrief struct {
	// Seq and ID name the event (each driver acts on the one it keys by).
	Seq             int64
	ID              string
	Type, LastError string
	// DeadAt is when it died: microseconds since the Unix epoch (UTC), by
	// the database's clock, exact as stored, so that it can bound a later
	// action (DeadScan.UpTo, ActDead's upTo).
	DeadAt int64
}

// DeadScan says which dead events Admin.ScanDead reads: in (dead_at, seq)
// order through the dead index, after the cursor (AfterDeadAt, AfterSeq).
type DeadScan struct {
	// Type: only events of this type, when not empty.
	Type string
	// UpTo: only events that died at or before it (microseconds since the
	// epoch), when > 0.
	UpTo int64
	// OlderThan: only events that died more than this long ago (by the
	// database's clock), when > 0.
	OlderThan time.Duration
	// AfterDeadAt and AfterSeq: only events after this position in
	// (dead_at, seq) order, when AfterDeadAt > 0 (the cursor: the last
	// event of the previous page).
	AfterDeadAt, AfterSeq int64
	// Limit is the most it reads.
	Limit int
}

// DeadAction is what Admin.ActDead does to dead events.
type DeadAction int

const (
	// ActRequeue makes them pending again (as RequeueIDs).
	ActRequeue DeadAction = iota + 1
	// ActPurge deletes them.
	ActPurge
)

// AuditEntry is one record of the audit trail of the operators' bulk
// actions (the outbox's _audit table).
type AuditEntry struct {
	Seq int64
	// At is when it was recorded, by the database's clock.
	At time.Time
	// By is who acted, as the caller named them.
	By string
	// Action says what was done ("requeue-group", "purge-group").
	Action string
	// Detail says on what (the group: type, error, bound), as text.
	Detail string
	// Events counts the events it changed.
	Events int64
}

// DeadGroupAdmin is what the grouping of dead events needs of a driver,
// beside Admin: a light scan of the dead events, one statement per batch of
// events to requeue or delete, and the audit table.
type DeadGroupAdmin interface {
	// ScanDead reads up to s.Limit dead events s picks, in (dead_at, seq)
	// order.
	ScanDead(ctx context.Context, x Execer, s DeadScan) ([]DeadBrief, error)
	// ActDead requeues or deletes (act) the events evs that are still dead
	// and died at or before upTo (microseconds since the epoch), and returns
	// how many: one statement per batch of up to 1,000 events. A requeue runs
	// in one transaction (the events of an aggregate come back together, in
	// their order); a purge commits each batch.
	ActDead(ctx context.Context, db DB, act DeadAction, evs []DeadBrief, upTo int64) (int64, error)
	// CreateAudit creates the audit table when missing (from the
	// migrations, as Herald creates its other tables).
	CreateAudit(ctx context.Context, x Execer) error
	// AddAudit records e (its Seq and At are the database's).
	AddAudit(ctx context.Context, x Execer, e AuditEntry) error
	// FindAudit lists up to limit records, the newest first; none when the
	// table does not exist.
	FindAudit(ctx context.Context, x Execer, limit int) ([]AuditEntry, error)
}
