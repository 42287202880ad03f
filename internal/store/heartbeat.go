package store

import (
	"context"
	"time"
)

// Heartbeats is what the database knows of the relays of one outbox: the
// instance table (<outbox>_relays, a row per relay instance with when it last
// said it was alive, by the database's clock), which ordered mode's leases
// beat and unordered relays beat too, and the partition leases of ordered
// mode (<outbox>_leases). Every age is measured by the database's clock, so
// the application's clocks are never compared with it.
type Heartbeats interface {
	// Create makes the instance table when it is missing (as migration
	// 0002 makes it).
	Create(ctx context.Context, x Execer) error
	// Beat records that instance is alive now: an upsert of its one row,
	// in a statement of its own.
	Beat(ctx context.Context, x Execer, instance string) error
	// Prune deletes the rows of instances not seen for longer than
	// olderThan (relays that stopped, or crashed, long ago).
	Prune(ctx context.Context, x Execer, olderThan time.Duration) error
	// Instances reads every instance's row, the most recently seen first.
	Instances(ctx context.Context, x Execer) ([]InstanceSeen, error)
	// Leases reads the partition leases that have an owner, by owner.
	Leases(ctx context.Context, x Execer) ([]LeaseOwner, error)
	// Seeded reports whether the lease table holds the partitions' rows:
	// an ordered relay ran on the outbox (its first one seeds them; they
	// stay, without an owner, when the relays stop). An unordered relay
	// never seeds them.
	Seeded(ctx context.Context, x Execer) (bool, error)
	// Due counts the pending events that are due (next attempt reached)
	// and how long the longest-due one has been due.
	Due(ctx context.Context, x Execer) (n int64, overdue time.Duration, err error)
	// Next returns how long until the earliest pending event is due (zero
	// or less: one is due now), and false when none is pending: one
	// statement that tells an idle outbox from one with work, now or later.
	Next(ctx context.Context, x Execer) (wait time.Duration, ok bool, err error)
}

// InstanceSeen is a relay instance's row: its name and how long ago it last
// beat.
type InstanceSeen struct {
	Instance string
	Ago      time.Duration
}

// LeaseOwner is the partition leases an instance owns: how many, and how
// long until the latest of them ends (negative: ended that long ago, the
// instance stopped renewing).
type LeaseOwner struct {
	Owner      string
	Partitions int
	Left       time.Duration
}
