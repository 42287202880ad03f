package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Lease is a partition lease of ordered mode as its holder took it: the
// partition and the generation the lease table gave it, bumped at every
// Acquire (a renewal keeps it).
type Lease struct {
	Partition  int
	Generation int64
}

// Fence is what the writes of an ordered batch are fenced by: the partition
// leases (of Partitions) that Instance held when the batch began. A fenced
// write changes a row only if, in the same statement, the lease of the row's
// partition is still Instance's under the same generation (and holds that
// lease row against an Acquire until the transaction ends), so the writes of
// an instance paused past its lease, after another took the partition over,
// change nothing.
type Fence struct {
	Instance   string
	Partitions int
	Leases     []Lease
}

// ErrLeaseLost is returned (wrapped) by a fenced write when a lease of its
// fence is no longer the instance's under that generation: the instance was
// paused past it (or its clock ran slow) and another took the partition over.
// The rows of the lost partitions were left alone; the batch is over.
var ErrLeaseLost = errors.New("partition lease lost to another instance")

// Failure is a failed publish to record: an attempt, a strike when confirmed,
// and either death or a retry after Delay (from the database's clock).
type Failure struct {
	ID     string
	Lease  int64  // the claim's lease (Row.Lease): 0 for none
	Err    string // stored as last_error (valid UTF-8: outbound.LastError)
	Strike bool
	Dead   bool
	Delay  time.Duration
}

// Stats are the outbox's figures.
type Stats struct {
	Pending, Failing, Dead int64
	OldestPending          time.Duration // by the database's clock; 0 when none

	// Scheduled counts the scheduled events not published yet (due or not);
	// NextScheduled is how long until the earliest of those not due yet
	// comes due (0 when none waits); Overdue is how long ago the earliest
	// due one came due (0 when none is due and unpublished).
	Scheduled              int64
	NextScheduled, Overdue time.Duration

	// Storage: the database reports DeadTuples and TableBytes (PostgreSQL).
	Storage bool
	// DeadTuples is the database's estimate of the outbox's dead row
	// versions (deleted or updated, not yet vacuumed); TableBytes its size
	// with indexes. Summed over partitions.
	DeadTuples, TableBytes int64
	// OldestXact is the age of the oldest transaction holding back vacuum's
	// horizon (0 when none), known only when the role may see every
	// session's (OldestXactKnown).
	OldestXact      time.Duration
	OldestXactKnown bool
}

// RelayCreateParams say what Relay.Create makes: the relay's additions a
// relay in this mode needs.
type RelayCreateParams struct {
	// Ordered: the relay runs in ordered mode (its lease and instance
	// tables, the indexes of ordered claims).
	Ordered bool
	// Retention: the relay keeps published events (the processed index).
	Retention bool
	// Skip, when an optional index could not be created, says whether the
	// relay goes on without it (name is the index's, err the failure); with
	// nil, Create returns the failure.
	Skip func(name string, err error) bool
	// Check: Create then checks what Relay.Check checks in the same mode,
	// answered from the catalog read the creation made when it created
	// nothing (one read for both).
	Check bool
}

// RelayCheckParams say what Relay.Check checks: the relay's additions a
// relay in this mode needs (as RelayCreateParams).
type RelayCheckParams struct {
	Ordered, Retention bool
}

// Relay is every operation the relay does on one outbox table.
type Relay interface {
	// Create creates the relay's additions to the outbox that a relay in
	// p's mode needs when missing: the lease tables of ordered mode
	// (required) and the indexes of ordered claims, dead events and
	// retention (optional: when creating one fails and p.Skip says so, the
	// relay goes on without it).
	Create(ctx context.Context, x Execer, p RelayCreateParams) error
	// Check is Outbox.Check for what the relay uses: the outbox table itself
	// and the relay's additions that a relay in p's mode needs.
	Check(ctx context.Context, x Execer, p RelayCheckParams) error

	// Claim claims up to p.Limit due events through db, the way this
	// database does it (locking the rows in a transaction the batch keeps,
	// leasing them, or in ordered mode reading the owned partitions), and
	// returns the batch, which marks itself. A driver with Position claims
	// from its remembered position (unless p.FromHead) and keeps it by what
	// the batch reports.
	Claim(ctx context.Context, db DB, p ClaimParams) (Batch, error)
	// Sweep is the sweep of ordered mode (Position): it looks for due events
	// of the owned partitions below their positions and lowers the
	// positions to them, and returns how many it found. ErrNotSupported
	// without Position.
	Sweep(ctx context.Context, x Execer, partitions int, owned []int32) (int, error)
	// RecoverOutage makes due now the retries of pending events of the
	// recovery's (topic, type) pairs that failed at or after its Since; with
	// a Fence, only those of the partitions whose leases it still holds.
	// It commits on db, in a transaction begun as Driver.LockingTx says
	// where that matters (MySQL: at REPEATABLE READ its range UPDATE locked
	// the gaps where new events go, for as long as it waited for a row
	// another batch held).
	RecoverOutage(ctx context.Context, db DB, rec Recovery) (int64, error)

	// Stats counts pending, failing and dead events and the oldest pending age.
	Stats(ctx context.Context, x Execer) (Stats, error)
	// OldestUnheld is the oldest pending age without the events an ordered
	// relay holds in line, behind a pending scheduled event of their
	// aggregate (sqlkit.OldestUnheld): the age an ordered relay reports.
	// Without scheduled events it is Stats' OldestPending.
	OldestUnheld(ctx context.Context, x Execer) (time.Duration, error)
	// NextDue returns how long, by the database's clock, until the earliest
	// pending scheduled event that is not due yet comes due, and false when
	// none waits. Retries and claims' leases are not counted: the relay
	// finds them at its next poll or wake-up.
	NextDue(ctx context.Context, x Execer) (time.Duration, bool, error)
	// Cleanup deletes up to limit events processed before olderThan ago,
	// unless another instance is cleaning.
	Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error)

	// Leases are the partition leases of ordered mode.
	Leases() Leases

	// CreatePartitioned creates the outbox table partitioned by occurred_at
	// (with its default partition and pending index) when it is missing
	// (Partitions; else ErrNotSupported).
	CreatePartitioned(ctx context.Context, x Execer) error
	// Partitioned reports whether the outbox table is partitioned (false
	// without Partitions).
	Partitioned(ctx context.Context, x Execer) (bool, error)
	// MaintainPartitions creates the missing partitions of the occurred_at
	// ranges (interval wide, aligned on multiples of it: a day's at UTC
	// midnight) from the one before the database's now to two after it,
	// and drops the partitions whose range ended more than olderThan ago and
	// that hold no pending or dead event and none published within
	// olderThan, each under a short lock of the whole table. It returns how
	// many it created and dropped; it goes on past a partition it cannot
	// create or drop, and returns the first error, but ends the round at
	// the first lock it could not have in time (a reader holds the table)
	// and, with no error, when another instance is maintaining the same
	// outbox's partitions: writers wait behind one such wait at most
	// (Partitions; else ErrNotSupported).
	MaintainPartitions(ctx context.Context, db *sql.DB, interval, olderThan time.Duration) (created, dropped int, err error)
	// CleanupDefault is Cleanup on the default partition alone (the range
	// partitions are dropped whole; Partitions, else ErrNotSupported).
	CleanupDefault(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error)
}

// Recovery is what RecoverOutage makes due: the retries of the (Topics[i],
// Types[i]) pairs that failed at or after Since (database time); with a Fence
// (ordered mode), only in the partitions whose leases it still holds, each
// instance recovering its own (another's claims may keep positions past its
// waiting retries).
type Recovery struct {
	Since         time.Time
	Topics, Types []string
	Fence         *Fence
}

// AcquireParams say what Leases.Acquire takes.
type AcquireParams struct {
	// Instance takes the partitions, each for Lease.
	Instance string
	Lease    time.Duration
	// Limit is the most partitions taken, of the first Partitions (those
	// below it).
	Limit, Partitions int
}

// Leases is the partition lease table and the instance heartbeat table of one
// outbox.
type Leases interface {
	// Seed makes sure partitions 0..n-1 have rows.
	Seed(ctx context.Context, x Execer, n int) error
	// Heartbeat records that instance is alive.
	Heartbeat(ctx context.Context, x Execer, instance string) error
	// Live counts instances seen within the last within.
	Live(ctx context.Context, x Execer, within time.Duration) (int, error)
	// Renew extends instance's unexpired leases by lease and returns them,
	// with the generations they keep.
	Renew(ctx context.Context, x Execer, instance string, lease time.Duration) ([]Lease, error)
	// Release gives instance's partitions back.
	Release(ctx context.Context, x Execer, instance string, parts []int) error
	// Acquire takes up to p.Limit expired partitions below p.Partitions for
	// p.Instance, for p.Lease, each under a new generation, and returns them.
	Acquire(ctx context.Context, db DB, p AcquireParams) ([]Lease, error)
	// ReleaseAll gives all of instance's partitions back.
	ReleaseAll(ctx context.Context, x Execer, instance string) error
	// Leave forgets instance's heartbeat.
	Leave(ctx context.Context, x Execer, instance string) error
}

// Waker wakes relays in other processes (Listen; without it both methods
// return ErrNotSupported).
type Waker interface {
	// Listen holds a connection to db's database in LISTEN on channel and
	// calls wake with each notification's payload (and once with "" when
	// listening starts), until ctx is done or the connection fails. The
	// connection is its own, not one of db's pool, which it would take for
	// ever.
	Listen(ctx context.Context, db *sql.DB, channel string, wake func(payload string)) error
	// Notify sends one notification on channel, with an empty payload; with
	// payloads, one notification each (in one statement).
	Notify(ctx context.Context, db *sql.DB, channel string, payloads ...string) error
}
