package outboxhook

import (
	"errors"

	"github.com/heraldgo/herald/internal/store"
)

// Errors a save returns, wrapped, when its events cannot be written. In each case
// the statement fails and its transaction is rolled back (or, in a transaction the
// caller opened, left unable to commit): no business row is kept without its events.
var (
	// ErrWALLevel is returned (wrapped) by db.Use for Config.Storage
	// StorageWAL when the server's wal_level is not logical: set wal_level =
	// logical (postgresql.conf, or ALTER SYSTEM SET wal_level = logical) and
	// restart PostgreSQL.
	ErrWALLevel = store.ErrWALLevel
	// ErrEncode wraps the codec's error for an event that cannot be encoded
	// (a channel or function field, a NaN float, ...), and is returned for an
	// event that one of the databases could not store as given, so that it is
	// refused on every database alike: a payload that is not JSON or not
	// UTF-8, or that holds \u0000 or an unpaired surrogate escape (which
	// PostgreSQL's jsonb refuses); a metadata key or value with a NUL byte or
	// invalid UTF-8; a type, topic, aggregate type or aggregate id with a NUL
	// byte, invalid UTF-8 or more than [MaxFieldLength] characters. The error
	// names the field.
	ErrEncode = errors.New("outboxhook: cannot encode event")
	// ErrPayloadTooLarge is returned for a payload over Config.MaxPayloadBytes,
	// or encoded metadata over the smaller of Config.MaxPayloadBytes and
	// [MaxMetadataBytes].
	ErrPayloadTooLarge = errors.New("outboxhook: payload too large")
	// ErrEmptyAggregateID is returned when an aggregate has no id at write time.
	ErrEmptyAggregateID = errors.New("outboxhook: aggregate id is empty")
	// ErrTableMissing is returned when the outbox table does not exist and
	// Config.DisableAutoCreate is set.
	ErrTableMissing = errors.New("outboxhook: outbox table does not exist")
	// ErrAggregateByValue is returned when a statement is given an aggregate
	// with pending events by value (db.Save(order) instead of db.Save(&order)):
	// the hook could not make it forget the events it writes, so it writes none
	// and fails the save. Pass a pointer.
	ErrAggregateByValue = errors.New("outboxhook: aggregate with pending events passed by value; pass a pointer")
	// ErrPartialWrite is returned when a statement over several aggregates with
	// pending events wrote only some of their rows (a DELETE of rows already
	// gone, an insert that skipped existing rows): which rows were written is
	// unknown, so no event is written and the save fails. Save them one by one.
	ErrPartialWrite = errors.New("outboxhook: a multi-row write wrote only some of its rows")
	// ErrAmbiguousUpsert is returned, before anything is written, for a Create
	// of aggregates with pending events with an ON CONFLICT clause that updates
	// nothing (clause.OnConflict{DoNothing: true}, or no DoUpdates and no
	// UpdateAll) on MySQL and MariaDB: GORM renders it as ON DUPLICATE KEY
	// UPDATE pk = pk, whose affected count under clientFoundRows (which Herald
	// requires) is 1 whether the row was inserted or left alone, so nothing
	// tells whether the events belong to a write. Create without the clause
	// and handle the duplicate key error, or upsert with UpdateAll or
	// DoUpdates (which write the row, and so its events). PostgreSQL and
	// SQLite count a row left alone as not affected: there the events of a DO
	// NOTHING that wrote nothing stay pending.
	ErrAmbiguousUpsert = errors.New("outboxhook: an upsert that does nothing on conflict cannot tell on MySQL whether it wrote its row")
	// ErrDuplicateID is returned by [AddMessages] for messages whose ids collide
	// with each other or with an event already in the outbox.
	ErrDuplicateID = errors.New("outboxhook: message id already used")
	// ErrStorageNotSupported is returned (wrapped) by db.Use for
	// Config.Storage StorageWAL on a database other than PostgreSQL.
	ErrStorageNotSupported = errors.New("outboxhook: StorageWAL needs PostgreSQL")
	// ErrScheduledWAL is returned for a scheduled event (events.Schedule
	// with a time or a key) saved with [StorageWAL]: the log publishes each
	// event at its commit and keeps none for later. Nothing is written.
	ErrScheduledWAL = errors.New("outboxhook: scheduled events need the outbox table (StorageTable), not StorageWAL")
	// ErrNotRegistered is returned by [Add] on a *gorm.DB without the plugin.
	ErrNotRegistered = errors.New("outboxhook: plugin not registered on this *gorm.DB (db.Use(outboxhook.New(...)))")
)
