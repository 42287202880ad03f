package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
)

// Key names a claimed row to mark: its ID, its Seq as claimed, and the
// claim's Lease (0: none). A mark of a key with a lease changes the row only
// while the row still holds that lease: once it ended and another relay
// claimed the row again, the mark of the first claim changes nothing.
type Key struct {
	ID    string
	Seq   int64
	Lease int64
}

// Lease is a partition lease of ordered mode as its holder took it: the
// partition and the generation the lease table gave it, bumped at every
// Acquire (a renewal keeps it).
type Lease struct {
	Partition  int
	Generation int64
}

// ScanLease reads a lease: its partition, then its generation (the rows of
// Renew and Acquire).
func ScanLease(rows *sql.Rows) (Lease, error) {
	var l Lease
	err := rows.Scan(&l.Partition, &l.Generation)
	return l, err
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

// Parts returns the fence's partitions and generations, index by index.
func (f *Fence) Parts() (parts []int32, gens []int64) {
	parts, gens = make([]int32, len(f.Leases)), make([]int64, len(f.Leases))
	for i, l := range f.Leases {
		parts[i], gens[i] = int32(l.Partition), l.Generation
	}
	return parts, gens
}

// JSON returns the fence's leases as a JSON array of [partition, generation]
// pairs (for drivers that read their arguments with JSON functions).
func (f *Fence) JSON() string {
	b := append(make([]byte, 0, 2+len(f.Leases)*12), '[')
	for i, l := range f.Leases {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(l.Partition), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, l.Generation, 10)
		b = append(b, ']')
	}
	return string(append(b, ']'))
}

// ErrLeaseLost is returned (wrapped) by a fenced write when a lease of its
// fence is no longer the instance's under that generation: the instance was
// paused past it (or its clock ran slow) and another took the partition over.
// The rows of the lost partitions were left alone; the batch is over.
var ErrLeaseLost = errors.New("partition lease lost to another instance")

// CheckFence returns ErrLeaseLost, naming how many leases were lost, when a
// fenced statement found fewer than all of f's leases held.
func CheckFence(f *Fence, held int) error {
	if f != nil && held < len(f.Leases) {
		return fmt.Errorf("%w: %d of %d partitions", ErrLeaseLost, len(f.Leases)-held, len(f.Leases))
	}
	return nil
}

// IDs returns the keys' ids.
func IDs(keys []Key) []string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return ids
}

// ExecSeqs runs q with one argument, the keys' seqs as a JSON array (the marks
// of drivers that find rows by seq); nothing for no keys.
func ExecSeqs(ctx context.Context, x Execer, q string, keys []Key) error {
	if len(keys) == 0 {
		return nil
	}
	seqs, err := SeqsJSON(keys)
	if err != nil {
		return err
	}
	_, err = x.ExecContext(ctx, q, seqs)
	return err
}

// ExecSeqLeases runs q with one argument, the keys' [seq, lease] pairs as a
// JSON array (the marks of drivers that find rows by seq and fence them by
// the claim's lease); nothing for no keys.
func ExecSeqLeases(ctx context.Context, x Execer, q string, keys []Key) error {
	if len(keys) == 0 {
		return nil
	}
	b := append(make([]byte, 0, 2+len(keys)*24), '[')
	for i, k := range keys {
		if k.Seq <= 0 {
			return fmt.Errorf("event %s claimed without its seq", k.ID)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, k.Seq, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, k.Lease, 10)
		b = append(b, ']')
	}
	_, err := x.ExecContext(ctx, q, string(append(b, ']')))
	return err
}

// SeqsJSON returns the keys' seqs as a JSON array, or an error when a key has
// none.
func SeqsJSON(keys []Key) (string, error) {
	seqs := make([]int64, len(keys))
	for i, k := range keys {
		if k.Seq <= 0 {
			return "", fmt.Errorf("event %s claimed without its seq", k.ID)
		}
		seqs[i] = k.Seq
	}
	return JSONInts(seqs), nil
}

// JSONInts returns xs as a JSON array.
func JSONInts(xs []int64) string {
	b := append(make([]byte, 0, 2+len(xs)*8), '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return string(append(b, ']'))
}

// Failure is a failed publish to record: an attempt, a strike when confirmed,
// and either death or a retry after Delay (from the database's clock).
type Failure struct {
	ID     string
	Lease  int64  // the claim's lease (Key.Lease): 0 for none
	Err    string // stored as last_error (valid UTF-8)
	Strike bool
	Dead   bool
	Delay  time.Duration
}

// LastError is err as a Failure's Err, stored as last_error on every
// database: NUL bytes (which PostgreSQL's text refuses) and invalid UTF-8
// (which a text column may refuse) replaced by U+FFFD, and at most 2,000
// bytes.
func LastError(err error) string {
	msg := strings.ToValidUTF8(strings.ReplaceAll(err.Error(), "\x00", "\uFFFD"), "\uFFFD")
	if len(msg) > 2000 {
		msg = strings.ToValidUTF8(msg[:2000], "") + "..."
	}
	return msg
}

// Stats are the outbox's figures.
type Stats struct {
	Pending, Failing, Dead int64
	OldestPending          time.Duration // by the database's clock; 0 when none

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

// Relay is every operation the relay does on one outbox table.
type Relay interface {
	// Create creates the relay's additions to the outbox when missing: the
	// lease tables of ordered mode (required) and the indexes of ordered
	// claims, dead events and retention (optional: when creating one fails
	// and skip(name, err) says so, the relay goes on without it).
	Create(ctx context.Context, x Execer, ordered, retention bool, skip func(name string, err error) bool) error
	// Check is Outbox.Check for what the relay uses: the outbox table itself
	// and the relay's additions that a relay in this mode needs.
	Check(ctx context.Context, x Execer, ordered, retention bool) error

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
	// Dead lists up to limit dead events, oldest death first.
	Dead(ctx context.Context, x Execer, limit int) ([]Row, error)
	// Requeue makes the dead event id pending again, committed on db (in a
	// transaction begun as Driver.LockingTx says, where that matters);
	// false if it is not dead. A driver with Position forgets it after the
	// commit: a claim that ran before did not see the row.
	Requeue(ctx context.Context, db DB, id string) (bool, error)
	// RequeueAll makes every dead event pending again, as Requeue does.
	RequeueAll(ctx context.Context, db DB) (int64, error)
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
	// create or drop, and returns the first error (Partitions; else
	// ErrNotSupported).
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
	// Acquire takes up to n expired partitions below partitions for instance,
	// each under a new generation, and returns them.
	Acquire(ctx context.Context, db DB, instance string, lease time.Duration, n, partitions int) ([]Lease, error)
	// ReleaseAll gives all of instance's partitions back.
	ReleaseAll(ctx context.Context, x Execer, instance string) error
	// Leave forgets instance's heartbeat.
	Leave(ctx context.Context, x Execer, instance string) error
}

// Waker wakes relays in other processes (Listen; without it both methods
// return ErrNotSupported).
type Waker interface {
	// Listen holds a connection to db's database in LISTEN on channel and
	// calls wake on each notification (and once when listening starts), until
	// ctx is done or the connection fails. The connection is its own, not one
	// of db's pool, which it would take for ever.
	Listen(ctx context.Context, db *sql.DB, channel string, wake func()) error
	// Notify sends one notification on channel.
	Notify(ctx context.Context, db *sql.DB, channel string) error
}

// relayNeeds reports whether o is one of the relay's additions to the outbox
// (by its name: the lease and instance tables and what is on them, the claim,
// dead and retention indexes) and whether a relay in this mode needs it: the
// lease and instance tables and the claim indexes in ordered mode, the
// processed index with retention, the dead index always.
func relayNeeds(o Object, ordered, retention bool) (relay, need bool) {
	name := string(o.Name.Name)
	switch {
	case strings.HasSuffix(name, "_leases"), strings.HasSuffix(name, "_relays"), strings.HasSuffix(name, "_ordered_idx"), strings.HasSuffix(name, "_aggregate_idx"):
		return true, ordered
	case strings.HasSuffix(name, "_processed_idx"):
		return true, retention
	case strings.HasSuffix(name, "_dead_idx"):
		return true, true
	}
	return false, false
}

// OutboxObjects are the objects of the migrations in fsys on the outbox t and
// the tables derived from it that are not the relay's: what the write path
// needs (in PostgreSQL's partitioned set, the partitioned table).
func OutboxObjects(fsys fs.FS, t ident.Table, quote func(ident.Table) string) ([]Object, error) {
	return filterObjects(fsys, DefaultOutbox, t, quote, func(o Object) bool {
		relay, _ := relayNeeds(o, false, false)
		return !relay
	})
}

// RelayObjects are the relay's additions to the outbox t in the migrations in
// fsys that a relay in this mode needs.
func RelayObjects(fsys fs.FS, t ident.Table, quote func(ident.Table) string, ordered, retention bool) ([]Object, error) {
	return filterObjects(fsys, DefaultOutbox, t, quote, func(o Object) bool {
		relay, need := relayNeeds(o, ordered, retention)
		return relay && need
	})
}

// InboxObjects are the objects of the migrations in fsys on the inbox t.
func InboxObjects(fsys fs.FS, t ident.Table, quote func(ident.Table) string) ([]Object, error) {
	return filterObjects(fsys, DefaultInbox, t, quote, func(Object) bool { return true })
}

func filterObjects(fsys fs.FS, def string, t ident.Table, quote func(ident.Table) string, keep func(Object) bool) ([]Object, error) {
	objs, err := SchemaObjects(fsys, def, t, quote)
	if err != nil {
		return nil, err
	}
	out := objs[:0]
	for _, o := range objs {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// NoWaker is the Waker of a database without Listen: its methods return
// ErrNotSupported.
type NoWaker struct{}

// Listen returns ErrNotSupported.
func (NoWaker) Listen(context.Context, *sql.DB, string, func()) error {
	return fmt.Errorf("listen: %w", ErrNotSupported)
}

// Notify returns ErrNotSupported.
func (NoWaker) Notify(context.Context, *sql.DB, string) error {
	return fmt.Errorf("notify: %w", ErrNotSupported)
}

// Unpositioned is embedded by the Relay of a database without Position or
// Partitions: its methods say so.
type Unpositioned struct{}

// Sweep returns ErrNotSupported (no Position).
func (Unpositioned) Sweep(context.Context, Execer, int, []int32) (int, error) {
	return 0, fmt.Errorf("sweep: %w", ErrNotSupported)
}

// CreatePartitioned returns ErrNotSupported (no Partitions).
func (Unpositioned) CreatePartitioned(context.Context, Execer) error {
	return fmt.Errorf("partitions: %w", ErrNotSupported)
}

// Partitioned returns false (no Partitions).
func (Unpositioned) Partitioned(context.Context, Execer) (bool, error) { return false, nil }

// MaintainPartitions returns ErrNotSupported (no Partitions).
func (Unpositioned) MaintainPartitions(context.Context, *sql.DB, time.Duration, time.Duration) (int, int, error) {
	return 0, 0, fmt.Errorf("partitions: %w", ErrNotSupported)
}

// CleanupDefault returns ErrNotSupported (no Partitions).
func (Unpositioned) CleanupDefault(context.Context, *sql.DB, time.Duration, int) (int64, error) {
	return 0, fmt.Errorf("partitions: %w", ErrNotSupported)
}
