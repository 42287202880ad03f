package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/ident"
)

// The outbox in the write-ahead log, as the WAL relay (walrelay), the admin
// page and the herald command use it: a replication slot streamed through a
// publication, the events decoded from the log's messages, the refused ones
// parked in an outbox table, a record of the slots in a table beside it, and
// what the server says of a slot. A database that can keep its outbox in its
// log (Messages) returns all of it from Driver.WAL; the others return nil.

// LSN is a position in the write-ahead log: a later position is greater.
type LSN uint64

// String is the position as the server writes it (PostgreSQL's pg_lsn text:
// "16/B374D848").
func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)) }

// ErrReceiveTimeout is returned (wrapped) by WALStream.Receive when its
// context's deadline passed before a message came.
var ErrReceiveTimeout = errors.New("no message before the deadline")

// WAL is what the WAL relay, the admin page and the herald command ask of a
// database whose outbox can be kept in its write-ahead log (Messages): on
// PostgreSQL, logical decoding with pgoutput. Names (slots, publications)
// are plain lowercase identifiers, checked by the caller. The methods that
// take an Execer run on an ordinary connection; Stream opens a replication
// connection of its own.
type WAL interface {
	// CheckDSN reports what is wrong with dsn, without connecting.
	CheckDSN(dsn string) error
	// CheckLevel returns ErrWALLevel (wrapped) unless the server writes
	// what logical decoding needs.
	CheckLevel(ctx context.Context, x Execer) error
	// ReplicationRight reports whether the session's role may stream a
	// replication slot.
	ReplicationRight(ctx context.Context, x Execer) (bool, error)

	// EnsurePublication creates the publication name, streaming the
	// logical messages whatever the tables, unless it exists.
	EnsurePublication(ctx context.Context, x Execer, name string) error
	// DropPublication drops the publication name, unless it does not exist
	// (dropped reports whether it did).
	DropPublication(ctx context.Context, x Execer, name string) (dropped bool, err error)

	// Slot returns what the server says of the replication slot name;
	// found is false when there is no such slot.
	Slot(ctx context.Context, x Execer, name string) (s Slot, found bool, err error)
	// CreateSlot creates the replication slot name and returns its start
	// (the position from which it keeps what is committed); created is
	// false when another session made it meanwhile.
	CreateSlot(ctx context.Context, x Execer, name string) (start LSN, created bool, err error)
	// DropSlot drops the replication slot name, unless it does not exist
	// (dropped reports whether it did). A slot a session streams cannot be
	// dropped: the server's error says so.
	DropSlot(ctx context.Context, x Execer, name string) (dropped bool, err error)
	// SlotStats reads what the server says of the replication slot name, as
	// the people on call see it. A slot that does not exist is no error:
	// Exists is false.
	SlotStats(ctx context.Context, x Execer, name string) (SlotStats, error)
	// SlotActive reports whether err is the server's refusal to stream a
	// slot another session streams.
	SlotActive(err error) bool

	// SlotRecords returns the record of the slots kept beside the outbox
	// table t (WALSlotsTable, in t's schema).
	SlotRecords(t ident.Table) SlotRecords
	// Parking returns what the WAL relay reads and marks in the outbox
	// table t, where it parks the events the broker refuses (it inserts
	// them with Driver.Outbox(t).Insert).
	Parking(t ident.Table) Parking

	// Stream starts streaming a slot on a replication connection of its
	// own, from the slot's confirmed position.
	Stream(ctx context.Context, p StreamParams) (WALStream, error)
	// Decode reads the outbox row of an event from the content of its
	// message in the log: the inverse of what the WAL outbox
	// (Driver.WALOutbox) writes. The row's Payload and Metadata may share
	// content, which the caller must not change while it uses the row.
	Decode(content []byte) (Row, error)
}

// Slot is what the server says of a replication slot.
type Slot struct {
	// Plugin is its output plugin (pgoutput for the WAL relay's); Database
	// the database it decodes; CurrentDatabase the session's.
	Plugin, Database, CurrentDatabase string
	// WALStatus is the server's word for the WAL the slot needs: "lost"
	// when the server removed WAL the slot needed (PostgreSQL's
	// pg_replication_slots.wal_status, see max_slot_wal_keep_size).
	WALStatus string
	// Confirmed is the slot's confirmed position (its restart position when
	// that is unknown; 0 when both are).
	Confirmed LSN
	// Active is true while a session streams the slot.
	Active bool
}

// SlotStats is what the server says of a slot, and of the session streaming
// it, for the people on call.
type SlotStats struct {
	// Exists is false when there is no slot of that name; the other fields
	// are then zero.
	Exists bool
	// Plugin and Database are the slot's output plugin and the database it
	// decodes; CurrentDatabase is the session's.
	Plugin, Database, CurrentDatabase string
	// Active is true while a session streams the slot, ActivePID its
	// process id (0 otherwise).
	Active    bool
	ActivePID int64
	// WALStatus is the server's word for the WAL the slot needs
	// (PostgreSQL's pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost).
	WALStatus string
	// RetainedBytes is the WAL the server keeps for the slot; 0 when its
	// restart position is unknown (lost).
	RetainedBytes int64
	// LagBytes is the WAL written since the slot's confirmed position.
	LagBytes int64
	// SinceReply is the time since the session streaming the slot last
	// reported its position; ReplyKnown is false when the slot is not
	// streamed, or the session may not see the streaming session's figures.
	SinceReply time.Duration
	ReplyKnown bool
	// SafeWALBytes is the WAL that can still be written before the server
	// invalidates the slot; SafeWALKnown is false when there is no limit.
	SafeWALBytes int64
	SafeWALKnown bool
}

// SlotRecords is the WAL relay's record of its slots: a row per slot, in a
// table of the relay's database (WALSlotsTable), that says the slot was made
// (or found) and the last confirmed position a relay saw it at. A slot is
// the server's and is not replicated (a promoted standby has none); a row is,
// with the rest of the database: a slot that is missing while its row is
// there was lost.
type SlotRecords interface {
	// Table is the table of the rows.
	Table() ident.Table
	// Ensure creates the table unless it exists.
	Ensure(ctx context.Context, x Execer) error
	// Read reads the row of slot; found is false when there is none, or no
	// table.
	Read(ctx context.Context, x Execer, slot string) (r SlotRecord, found bool, err error)
	// Mark records that slot exists, at lsn, unless it is recorded already;
	// then moves its confirmed position to lsn when lsn is later.
	Mark(ctx context.Context, x Execer, slot string, lsn LSN) error
	// Reset records slot as made afresh at lsn.
	Reset(ctx context.Context, x Execer, slot string, lsn LSN) error
	// Delete removes the row of slot, reporting whether there was one; no
	// table is no error.
	Delete(ctx context.Context, x Execer, slot string) (bool, error)
}

// SlotRecord is a slot's row in SlotRecords.
type SlotRecord struct {
	// Start is where the slot began: its position when it was made (or
	// first found). Confirmed is the last confirmed position of the slot a
	// relay saw when it connected.
	Start, Confirmed LSN
	// CreatedAt is when the row was written, UpdatedAt when Confirmed was.
	CreatedAt, UpdatedAt time.Time
}

// Aggregate names an aggregate: its type and id.
type Aggregate struct{ Type, ID string }

// Parking is what the WAL relay does in the outbox table it parks refused
// events in, as rows a table relay retries and dead-letters.
type Parking interface {
	// MarkFailed records failures on rows of the table, as the table
	// relay's marks do.
	MarkFailed(ctx context.Context, x Execer, fs []Failure) error
	// PendingAggregates returns the aggregates that have pending events
	// (neither processed nor dead) in the table.
	PendingAggregates(ctx context.Context, x Execer) ([]Aggregate, error)
	// AggregatePending reports whether the aggregate a has pending events
	// in the table.
	AggregatePending(ctx context.Context, x Execer, a Aggregate) (bool, error)
}

// StreamParams say what WAL.Stream streams.
type StreamParams struct {
	// DSN is the database's; the stream connects to it on a replication
	// connection of its own.
	DSN string
	// Slot is the replication slot streamed, Publication the publication
	// named to its output plugin.
	Slot, Publication string
	// Prefix is the prefix of the messages the stream returns: the log's
	// transactional messages with another prefix, and its other changes,
	// are skipped.
	Prefix string
}

// WALStream is a replication connection streaming a slot. One goroutine uses
// it at a time.
type WALStream interface {
	// Receive returns the next item of the stream. It returns
	// ErrReceiveTimeout (wrapped) when ctx's deadline passes first; its
	// other errors end the stream.
	Receive(ctx context.Context) (StreamItem, error)
	// Report sends the server the position everything before which is
	// handled: the slot's confirmed position.
	Report(ctx context.Context, confirmed LSN) error
	// Close closes the connection.
	Close(ctx context.Context) error
}

// StreamKind is what a StreamItem is.
type StreamKind int

// Kinds of StreamItem.
const (
	// StreamBegin: a transaction begins.
	StreamBegin StreamKind = iota + 1
	// StreamCommit: it committed; LSN is its end.
	StreamCommit
	// StreamMessage: an event of it, a message with the stream's prefix;
	// LSN is the message's, Content its content (the item's own).
	StreamMessage
	// StreamKeepalive: the server's keepalive; LSN is the end of its WAL.
	// ReplyRequested is true when the server asks for a Report at once.
	StreamKeepalive
)

// StreamItem is what WALStream.Receive returns.
type StreamItem struct {
	Kind           StreamKind
	LSN            LSN
	Content        []byte
	ReplyRequested bool
}
