package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/ident"
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
	// Due counts the pending events that are due (next attempt reached)
	// and how long the longest-due one has been due.
	Due(ctx context.Context, x Execer) (n int64, overdue time.Duration, err error)
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

// heartbeater is a Driver that knows its relays' heartbeats.
type heartbeater interface {
	Heartbeats(t ident.Table) Heartbeats
}

// HeartbeatsOf returns the heartbeats of the outbox t on d's database, or nil
// when d does not keep them.
func HeartbeatsOf(d Driver, t ident.Table) Heartbeats {
	if h, ok := d.(heartbeater); ok {
		return h.Heartbeats(t)
	}
	return nil
}

// scanInstance reads an instance row: its name, then its age in microseconds.
func scanInstance(rows interface{ Scan(...any) error }) (InstanceSeen, error) {
	var s InstanceSeen
	var us int64
	err := rows.Scan(&s.Instance, &us)
	s.Ago = time.Duration(us) * time.Microsecond
	return s, err
}

// scanLeaseOwner reads a lease owner row: the owner, its partitions, then
// the time left on its latest lease in microseconds.
func scanLeaseOwner(rows interface{ Scan(...any) error }) (LeaseOwner, error) {
	var o LeaseOwner
	var us int64
	err := rows.Scan(&o.Owner, &o.Partitions, &us)
	o.Left = time.Duration(us) * time.Microsecond
	return o, err
}

// HeartbeatSQL is one database's statements for Heartbeats, which it
// implements: a driver gives its SQL, the calls are the same everywhere.
// Durations are read as microseconds.
type HeartbeatSQL struct {
	Create    string // makes the relays table when missing
	Beat      string // upserts one instance's row, seen now: $1/? the instance
	Prune     string // deletes rows not seen for $1/? microseconds
	Instances string // instance, microseconds since seen; newest first
	Leases    string // owner, partitions, microseconds its latest lease has left
	Due       string // due events, microseconds the oldest has been due
}

type heartbeatSQL struct{ q HeartbeatSQL }

// Heartbeats returns the Heartbeats that run q.
func (q HeartbeatSQL) Heartbeats() Heartbeats { return heartbeatSQL{q} }

func (h heartbeatSQL) Create(ctx context.Context, x Execer) error {
	_, err := x.ExecContext(ctx, h.q.Create)
	return err
}

func (h heartbeatSQL) Beat(ctx context.Context, x Execer, instance string) error {
	_, err := x.ExecContext(ctx, h.q.Beat, instance)
	return err
}

func (h heartbeatSQL) Prune(ctx context.Context, x Execer, olderThan time.Duration) error {
	_, err := x.ExecContext(ctx, h.q.Prune, olderThan.Microseconds())
	return err
}

func (h heartbeatSQL) Instances(ctx context.Context, x Execer) ([]InstanceSeen, error) {
	return Collect(ctx, x, h.q.Instances, nil, func(rows *sql.Rows) (InstanceSeen, error) { return scanInstance(rows) })
}

func (h heartbeatSQL) Leases(ctx context.Context, x Execer) ([]LeaseOwner, error) {
	return Collect(ctx, x, h.q.Leases, nil, func(rows *sql.Rows) (LeaseOwner, error) { return scanLeaseOwner(rows) })
}

func (h heartbeatSQL) Due(ctx context.Context, x Execer) (int64, time.Duration, error) {
	var n, us int64
	err := QueryRow(ctx, x, h.q.Due, nil, &n, &us)
	return n, time.Duration(us) * time.Microsecond, err
}
