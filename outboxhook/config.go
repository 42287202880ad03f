package outboxhook

import (
	"errors"
	"fmt"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// DefaultTable is the outbox table's default name, "outbox_messages".
const DefaultTable = store.DefaultOutbox

// DefaultMaxPayloadBytes is the default limit on an encoded payload: 978,944
// bytes (956 KiB), 1 MiB less 68 KiB. The brokers' defaults bound a
// message's payload and headers together at about 1 MiB (NATS's max_payload,
// Kafka's max.message.bytes), and the headers (the metadata, at most
// [MaxMetadataBytes], Herald's keys, the message id) take up to 68 KiB: an
// event the save accepts with every default is never refused by them.
const DefaultMaxPayloadBytes = 1<<20 - 68<<10

// DefaultWALPrefix is the default [Config].WALPrefix: "herald".
const DefaultWALPrefix = store.DefaultWALPrefix

// Storage is where the plugin writes events.
type Storage int

const (
	// StorageTable writes each event as a row of the outbox table
	// (Config.Table), which package relay publishes. The default.
	StorageTable Storage = iota
	// StorageWAL (experimental: see package walrelay) writes each event, on
	// PostgreSQL only, as a transactional
	// logical message in the write-ahead log (pg_logical_emit_message(true,
	// Config.WALPrefix, content)) instead of a row: the message exists iff
	// the saving transaction (and the savepoint it was written under)
	// commits, no table is written or needed, and package walrelay
	// publishes the messages through a replication slot, in commit order.
	// The server must run at wal_level=logical ([ErrWALLevel] at db.Use
	// otherwise). The content is the row's columns as JSON (id, type,
	// version, aggregate, topic, payload, metadata with the trace context,
	// occurred_at). Aggregates are not locked: the log is in commit order.
	// AddMessages cannot tell an id already written ([ErrDuplicateID] only
	// for ids repeated in one call). In a transaction the plugin cannot
	// watch (begun on a pool it does not wrap), or run on the *sql.Tx that
	// SQLTx hands out, a savepoint rolled back after the write is not seen,
	// and the events it undid are forgotten as committed.
	StorageWAL
)

// String returns "table" or "wal".
func (s Storage) String() string {
	switch s {
	case StorageTable:
		return "table"
	case StorageWAL:
		return "wal"
	}
	return fmt.Sprintf("Storage(%d)", int(s))
}

// Config configures the outbox hook. The zero value is ready to use.
type Config struct {
	// Table is the outbox table, optionally schema-qualified ("app.outbox").
	// Defaults to "outbox_messages" (DefaultTable).
	Table string
	// Topic returns the topic the relay publishes an event to. It sees the
	// envelope with every field but Topic set. Defaults to [DefaultTopic], the
	// event type ("order.paid").
	Topic func(env *events.Envelope) string
	// EventMetadata, when set, returns metadata to store with each event,
	// computed from the event itself: over the context's metadata
	// (events.WithMetadata, the trace context), under the metadata given at
	// record time (see "Metadata" in the package documentation for consumers
	// of Watermill's CQRS component). Defaults to none.
	EventMetadata func(e events.Event) events.Metadata
	// Codec encodes payloads; it must produce JSON (the column is jsonb).
	// Defaults to events.JSON.
	Codec events.Codec
	// MaxPayloadBytes is the largest encoded payload accepted, at most
	// [MaxPayloadLimit]; it bounds the encoded metadata too, with
	// [MaxMetadataBytes]. A larger payload or metadata fails the save with
	// [ErrPayloadTooLarge], on every database alike. Defaults to 956 KiB
	// (DefaultMaxPayloadBytes).
	MaxPayloadBytes int
	// DisableAutoCreate, when true, never creates the outbox table: it must
	// exist (apply [github.com/heraldgo/herald/migrations]), and a save fails with
	// [ErrTableMissing] when it does not. When false, the table and its index
	// are created at db.Use when missing and left alone when present, so a
	// role without DDL rights works against a table created beforehand.
	// Defaults to false.
	DisableAutoCreate bool
	// Notify, when set, is called once a transaction that wrote events
	// committed, in the goroutine that committed; it must not block (see
	// "Notify" in the package documentation). Set it to a relay's Wake in the
	// relay's process, or to a relay.Notifier's Notify in other processes.
	// Defaults to none: the relay finds events by polling.
	Notify func()
	// Storage is where events are written: [StorageTable] (rows of Table) or
	// [StorageWAL] (logical messages in PostgreSQL's write-ahead log, for
	// package walrelay). Defaults to StorageTable.
	Storage Storage
	// WALPrefix is the prefix of the logical messages StorageWAL writes;
	// the WAL relay publishes those of its prefix only (walrelay's
	// Config.Prefix). Unused with StorageTable. Defaults to "herald"
	// (DefaultWALPrefix).
	WALPrefix string
}

// DefaultTopic is the default [Config].Topic: the event type.
func DefaultTopic(env *events.Envelope) string { return env.Type }

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Topic == nil {
		c.Topic = DefaultTopic
	}
	if c.Codec == nil {
		c.Codec = events.JSON{}
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.WALPrefix == "" {
		c.WALPrefix = DefaultWALPrefix
	}
}

// Validate reports what is wrong with c after defaults are applied: a table name
// that is not one or two plain SQL identifiers, a payload limit that is
// negative or over [MaxPayloadLimit], a Storage that is neither StorageTable
// nor StorageWAL, or a WALPrefix with a NUL byte or invalid UTF-8. Whether
// the database can keep StorageWAL is checked at db.Use.
func (c Config) Validate() error {
	_, err := c.parse()
	return err
}

// parse applies c's defaults, checks c and returns its Table parsed: New
// calls it and keeps the table (and the error, for db.Use); Validate calls
// it on a copy.
func (c *Config) parse() (ident.Table, error) {
	c.setDefaults()
	var errs []error
	table, err := ident.ParseTable(c.Table)
	if err != nil {
		errs = append(errs, fmt.Errorf("invalid Table: %w", err))
	}
	if c.MaxPayloadBytes < 0 || c.MaxPayloadBytes > MaxPayloadLimit {
		errs = append(errs, fmt.Errorf("MaxPayloadBytes is %d, must be positive and at most %d", c.MaxPayloadBytes, MaxPayloadLimit))
	}
	if c.Storage != StorageTable && c.Storage != StorageWAL {
		errs = append(errs, fmt.Errorf("unknown Storage %d", int(c.Storage)))
	}
	if err := storableText(c.WALPrefix); err != nil {
		errs = append(errs, fmt.Errorf("WALPrefix %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return ident.Table{}, fmt.Errorf("outboxhook: invalid config: %w", err)
	}
	return table, nil
}
