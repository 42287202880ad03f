// Package store is Herald's storage seam: every statement the write path, the
// relay and the inbox send to a database goes through the interfaces here, and
// each database has one implementation holding all of its SQL (packages
// postgres, sqlite and mysql below this one). The implementation is picked from
// the *gorm.DB's dialector (package drivers), and the conformance suite
// (package storetest) runs the same behaviour against each.
//
// The operations are named after what they do for the outbox, not after SQL:
// insert events, settle earlier writes, lock aggregates, claim, mark, lease,
// clean up, notify. Each takes the Execer to run on (a pool, a transaction, a
// connection), so the caller decides the transaction.
package store

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
)

// Execer runs statements: a *sql.DB, *sql.Tx, *sql.Conn or gorm.ConnPool.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// DB is a database handle that can begin transactions: a *sql.DB.
type DB interface {
	Execer
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// ErrTableMissing is returned (wrapped) by an operation on a table that does
// not exist.
var ErrTableMissing = errors.New("table does not exist")

// Caps says what a database can do that others cannot.
type Caps struct {
	// Listen: the relay can be woken across processes (LISTEN/NOTIFY). Without
	// it, other processes' relays find events by polling.
	Listen bool
	// RowLocks: a claim can lock the rows it returns and skip rows others
	// locked (FOR UPDATE SKIP LOCKED), so the relay claims, publishes and marks
	// in one transaction. Without it a claim leases its rows by moving their
	// available_at past the publish, in a transaction of its own.
	RowLocks bool
	// AbortTx: a transaction can be put into a state in which its COMMIT rolls
	// back (for transactions the write path cannot watch).
	AbortTx bool
	// FoundRows: an upsert counts a row it found and left alone as affected
	// (MySQL under clientFoundRows, which Herald requires: ON DUPLICATE KEY
	// UPDATE pk = pk reports 1 for an insert and for a row left alone), so
	// the count of an upsert that updates nothing on conflict cannot tell
	// whether it wrote its row.
	FoundRows bool
}

// Driver is one database's implementation of everything Herald asks of it.
type Driver interface {
	// Name is the dialect: "postgres", "sqlite" or "mysql".
	Name() string
	// Caps says what the database can do.
	Caps() Caps
	// Quote quotes a table name for this database.
	Quote(t ident.Table) string
	// Migrations are the database's numbered migrations
	// (NNNN_name.up.sql/.down.sql, for the default table names).
	Migrations() fs.FS
	// MigrationsTableSQL creates MigrationsTable if missing;
	// RecordMigrationSQL inserts a row in it (version, name).
	MigrationsTableSQL() string
	RecordMigrationSQL() string
	// Outbox returns the operations on the outbox table t.
	Outbox(t ident.Table) Outbox
	// Inbox returns the operations on the inbox table t.
	Inbox(t ident.Table) Inbox
	// Relay returns the relay's operations on the outbox table t.
	Relay(t ident.Table) Relay
	// Admin returns the operations the people on call run on the outbox table t.
	Admin(t ident.Table) Admin
	// Waker returns the cross-process wake-ups, or nil without Caps.Listen.
	Waker() Waker
	// ObjectExists reports whether what the migration statement o makes
	// exists (its table, index or column), or for a step whether its check
	// returns a row.
	ObjectExists(ctx context.Context, x Execer, o Object) (bool, error)
	// LockingTx returns the options of the transactions Herald begins to lock
	// outbox rows beyond a statement (the relay's claim, held across its
	// publish, and its marks), for a pool whose sessions keep the server's
	// default isolation: READ COMMITTED on MySQL, where REPEATABLE READ
	// gap-locks the ranges a locking read walked and the application's
	// INSERTs of new events would wait for the publish; nil (the pool's
	// default) elsewhere.
	LockingTx() *sql.TxOptions
	// PermissionDenied reports whether err says the role may not do what it
	// tried (create an index, say).
	PermissionDenied(err error) bool
}

// Event is one outbox row as the write path inserts it.
type Event struct {
	ID            uuid.UUID
	Type          string
	Version       int
	AggregateType string
	AggregateID   string
	Topic         string
	Payload       []byte // JSON
	Metadata      []byte // JSON object
	OccurredAt    time.Time
}

// Written is an event written in a transaction whose end the write path could
// not see, with the token Insert returned for it.
type Written struct {
	ID    uuid.UUID
	Token int64
}

// Outcome is what Settle learned of an earlier write.
type Outcome int

const (
	// Unknown: the transaction rolled back, or it cannot be told: write again
	// (under the same id; Insert leaves an existing row alone).
	Unknown Outcome = iota
	// Committed: forget the event.
	Committed
	// InProgress: still open; writing again waits for it to end.
	InProgress
)

// Outbox is every operation on one outbox table.
type Outbox interface {
	// Exists reports whether the table exists.
	Exists(ctx context.Context, x Execer) (bool, error)
	// Create creates the table and its indexes if missing (for the relay:
	// with the relay's tables and indexes too), from every migration.
	Create(ctx context.Context, x Execer) error
	// Check returns ErrSchemaOutdated (wrapped, naming the migration to run)
	// when the table exists but lacks a column, table or row a migration
	// makes; nil when it is up to date or missing.
	Check(ctx context.Context, x Execer) error

	// Insert inserts events, leaving rows whose id exists alone, and returns how
	// many it inserted. With tokens it also returns, by id, a token that tells
	// Settle later whether the inserting transaction committed.
	Insert(ctx context.Context, x Execer, evs []Event, tokens bool) (int64, map[uuid.UUID]int64, error)
	// Settle tells, for each earlier write, whether its transaction committed.
	Settle(ctx context.Context, x Execer, ws []Written) ([]Outcome, error)
	// LockAggregates takes, in x's transaction, a lock per key (sorted) held
	// until it ends, serializing the writers of one aggregate.
	LockAggregates(ctx context.Context, x Execer, keys []int64) error
	// Abort puts x's transaction into a state in which it cannot commit, if
	// the database can (Caps.AbortTx).
	Abort(ctx context.Context, x Execer)
}

// Inbox is every operation on one inbox table.
type Inbox interface {
	// Exists reports whether the table exists.
	Exists(ctx context.Context, x Execer) (bool, error)
	// Create creates the table and its index if missing.
	Create(ctx context.Context, x Execer) error
	// Check is Outbox.Check for the inbox table.
	Check(ctx context.Context, x Execer) error
	// Insert records (consumer, id) and reports whether it was new; a
	// concurrent insert of the same key waits for the first to end.
	Insert(ctx context.Context, x Execer, consumer, id string) (bool, error)
	// Cleanup deletes up to limit rows processed before olderThan ago, unless
	// another instance is cleaning, and returns how many.
	Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error)
}

// LockBuckets is how many rows an aggregate locks table holds (made by the
// migrations, MySQL's and PostgreSQL's): aggregates are hashed into them, and
// two aggregates in one bucket serialize their writers, harmlessly. A
// transaction then holds row locks, which cost no entry in the database's
// lock table (PostgreSQL keeps them in the rows), however many aggregates it
// writes.
const LockBuckets = 1 << 16

// Buckets maps aggregate lock keys to their rows of the locks table, sorted
// and without repeats: the order writers lock them in.
func Buckets(keys []int64) []int64 {
	b := make([]int64, len(keys))
	for i, k := range keys {
		b[i] = int64(uint64(k) % LockBuckets)
	}
	slices.Sort(b)
	return slices.Compact(b)
}
