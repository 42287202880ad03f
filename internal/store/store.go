package store

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
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

// ErrWALLevel is returned (wrapped) by the Check of a WAL outbox, and by the
// WAL relay's checks, when the server does not write what logical decoding
// needs (PostgreSQL's wal_level is not logical).
var ErrWALLevel = errors.New("wal_level must be logical: set wal_level = logical in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL")

// Capability is something a database can do that others cannot.
type Capability uint

const (
	// Listen: relays can be woken across processes (Driver.Waker). Without
	// it, other processes' relays find events by polling.
	Listen Capability = 1 << iota
	// RowLocks: a claim locks its rows in a transaction the batch keeps and
	// skips rows others locked (FOR UPDATE SKIP LOCKED). Without it a claim
	// leases its rows by moving their available_at past the batch's end, in
	// a statement of its own, and the marks check that lease.
	RowLocks
	// Position: claims start from a remembered position instead of the head
	// of the pending index, where the entries of published rows lie until
	// vacuum removes them; the relay sweeps (Relay.Sweep and claims with
	// ClaimParams.FromHead) for what the position passed.
	Position
	// Partitions: the outbox can be partitioned by occurred_at and published
	// events dropped a partition at a time (Relay.CreatePartitioned and the
	// rest).
	Partitions
	// AbortTx: Outbox.Abort puts a transaction into a state in which its
	// COMMIT rolls back (for transactions the write path cannot watch).
	// Without it Abort does nothing.
	AbortTx
	// FoundRows: an upsert counts a row it found and left alone as affected
	// (MySQL under clientFoundRows, which Herald requires: ON DUPLICATE KEY
	// UPDATE pk = pk reports 1 for an insert and for a row left alone), so
	// the count of an upsert that updates nothing on conflict cannot tell
	// whether it wrote its row.
	FoundRows
	// Messages: the outbox can be kept in the write-ahead log instead of a
	// table, each event a transactional logical message (Driver.WALOutbox),
	// streamed by logical decoding (PostgreSQL at wal_level=logical) through
	// Driver.WAL.
	Messages
)

// Caps is the set of capabilities a driver declares.
type Caps Capability

// Has reports whether the set holds c.
func (s Caps) Has(c Capability) bool { return Capability(s)&c != 0 }

// ErrNotSupported is returned (wrapped) by an operation the database cannot
// do (see Capability).
var ErrNotSupported = errors.New("not supported by this database")

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
	// RelayLookups are the objects Relay(t).Create with p reads in the
	// catalog in one statement (ObjectsExist): a fleet reads them for many
	// tenants at once (migrate.Prefetched).
	RelayLookups(t ident.Table, p RelayCreateParams) ([]Object, error)
	// Admin returns the operations the people on call run on the outbox table t.
	Admin(t ident.Table) Admin
	// Heartbeats returns what the database knows of the relays of the outbox
	// table t: their instance rows, the partition leases, the due backlog.
	Heartbeats(t ident.Table) Heartbeats
	// Waker returns the cross-process wake-ups (Listen).
	Waker() Waker
	// WALOutbox returns an Outbox whose Insert writes each event as a
	// transactional logical message with the given prefix instead of a row
	// (Messages; ErrNotSupported without it). It has no table: Exists
	// reports true, Create does nothing, Check returns ErrWALLevel (wrapped)
	// when the server does not decode logical messages, LockAggregates does
	// nothing (the log is in commit order), and Settle and Abort are the
	// table's.
	WALOutbox(prefix string) (Outbox, error)
	// WAL returns what the WAL relay, the admin page and the herald command
	// ask of the database whose outbox is kept in its log: its slots, its
	// stream, the decoding of its messages (Messages; nil without it).
	WAL() WAL
	// ObjectExists reports whether what the migration statement o makes
	// exists (its table, index or column), or for a step whether its check
	// returns a row.
	ObjectExists(ctx context.Context, x Execer, o Object) (bool, error)
	// ObjectsExist reports what ObjectExists reports for each of objs (tables,
	// indexes and columns; no step), in one statement.
	ObjectsExist(ctx context.Context, x Execer, objs []Object) ([]bool, error)
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
	// Schemas returns, sorted, the schemas (MySQL: databases) whose name
	// matches the LIKE pattern like and that hold a table named table: the
	// tenants of a schema-per-tenant service. ErrNotSupported on SQLite,
	// whose tenants are files.
	Schemas(ctx context.Context, x Execer, like, table string) ([]string, error)
}

// Row is one outbox row: the one shape the store's operations read and
// write. Insert takes the columns an event is written with (ID to
// OccurredAt); a claim also reads the row's Seq (where the driver marks by
// it), Attempts, Strikes and the claim's Lease; Admin.FindDead also reads
// LastError and DeadAt.
type Row struct {
	ID            string // a UUID
	Type          string
	Version       int
	AggregateType string
	AggregateID   string
	Topic         string
	Payload       []byte // JSON
	Metadata      []byte // JSON object
	OccurredAt    time.Time
	// Seq is the row's insertion number where the driver reads it (MySQL,
	// SQLite: their primary key, by which they mark rows); 0 elsewhere.
	Seq               int64
	Attempts, Strikes int
	// Lease is the claim's own lease on the row where the claim leased it
	// (SQLite: the available_at it set); 0 otherwise. The marks of the
	// claim check it.
	Lease     int64
	LastError string
	DeadAt    time.Time
	// LastFailedAt and NextAttemptAt (available_at) are read for failing
	// events (Admin.FindFailing); zero otherwise.
	LastFailedAt, NextAttemptAt time.Time
	// Schedule is when a scheduled event comes due, for Insert: the zero
	// Schedule for an event due at once. Claims read Scheduled.
	Schedule Schedule
	// Scheduled: the row is a scheduled event (its due_at is set); read by
	// ordered claims, which confirm such rows before they return them.
	Scheduled bool
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

// OutboxInsertParams say what Outbox.Insert writes.
type OutboxInsertParams struct {
	// Rows are the events, their columns ID to OccurredAt.
	Rows []Row
	// Tokens: also return, by id, each inserted event's token for Settle
	// (Written.Token); a database that cannot tell another transaction's
	// fate returns none, and Settle looks the rows up.
	Tokens bool
}

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

	// Insert inserts p.Rows, leaving rows whose id exists alone, and returns
	// how many it inserted. With p.Tokens it also returns, by id, a token
	// that tells Settle later whether the inserting transaction committed.
	Insert(ctx context.Context, x Execer, p OutboxInsertParams) (int64, map[uuid.UUID]int64, error)
	// Settle tells, for each earlier write, whether its transaction committed.
	Settle(ctx context.Context, x Execer, ws []Written) ([]Outcome, error)
	// Reschedule cancels or moves, in x's transaction, the scheduled events
	// p names that are not due yet by the database's clock, and counts what
	// it found of the others (see RescheduleResult). A WAL outbox returns
	// ErrNotSupported.
	Reschedule(ctx context.Context, x Execer, p RescheduleParams) (RescheduleResult, error)
	// LockAggregates takes, in x's transaction, a lock per key (sorted) held
	// until it ends, serializing the writers of one aggregate.
	LockAggregates(ctx context.Context, x Execer, keys []int64) error
	// Abort puts x's transaction into a state in which it cannot commit
	// (AbortTx; without it, nothing).
	Abort(ctx context.Context, x Execer)
}

// Finder is an Outbox whose events are rows that can be looked up: every
// outbox table is one; the WAL outbox, whose events leave no row, is not.
type Finder interface {
	// Present returns which of ids have a row that x sees (in x's
	// transaction: its own uncommitted rows included).
	Present(ctx context.Context, x Execer, ids []uuid.UUID) (map[uuid.UUID]bool, error)
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
	// Recorded reports whether (consumer, id) is in the table exactly as
	// given, even where the column's collation equates it with another; false
	// for a key the database cannot hold. It takes no lock.
	Recorded(ctx context.Context, x Execer, consumer, id string) (bool, error)
	// Consumers reports, for each of consumers (stored keys), whether the
	// table holds a row of it, exactly as given: one query that probes the
	// primary key once per name and takes no lock.
	Consumers(ctx context.Context, x Execer, consumers []string) ([]bool, error)
	// Cleanup deletes up to limit rows processed before olderThan ago, unless
	// another instance is cleaning, and returns how many.
	Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error)
}
