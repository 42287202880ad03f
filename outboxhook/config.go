package outboxhook

import (
	"errors"
	"fmt"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/ident"
)

// DefaultTable is the outbox table's default name.
const DefaultTable = "outbox_messages"

// DefaultMaxPayloadBytes is the default limit on an encoded payload: 1 MiB.
const DefaultMaxPayloadBytes = 1 << 20

// Config configures the outbox hook. The zero value is ready to use.
type Config struct {
	// Table is the outbox table, optionally schema-qualified ("app.outbox").
	// Defaults to "outbox_messages".
	Table string
	// Topic returns the topic the relay publishes an event to. It sees the
	// envelope with every field but Topic set. Defaults to [DefaultTopic], the
	// event type ("order.paid").
	Topic func(env *events.Envelope) string
	// EventMetadata, when set, returns metadata to store with each event,
	// computed from the event itself: over the context's metadata
	// (events.WithMetadata, the trace context), under the metadata given at
	// record time. For consumers written for Watermill's CQRS component with
	// its default cqrs.JSONMarshaler, which routes by the "name" metadata key:
	//
	//	EventMetadata: func(e events.Event) events.Metadata {
	//		return events.Metadata{"name": cqrs.JSONMarshaler{}.Name(e)}
	//	}
	//
	// Defaults to nil: none.
	EventMetadata func(e events.Event) events.Metadata
	// Codec encodes payloads; it must produce JSON (the column is jsonb).
	// Defaults to events.JSON.
	Codec events.Codec
	// MaxPayloadBytes is the largest encoded payload accepted, at most
	// [MaxPayloadLimit]; it bounds the encoded metadata too, with
	// [MaxMetadataBytes]. A larger payload or metadata fails the save with
	// [ErrPayloadTooLarge], on every database alike. Defaults to 1 MiB.
	MaxPayloadBytes int
	// DisableAutoCreate, when true, never creates the outbox table: it must exist
	// (run the migration in outboxhook/migrations), and a save fails with
	// [ErrTableMissing] when it does not. Defaults to false: the table and its
	// index are created at db.Use when missing, and left alone when present, so a
	// role without DDL rights works against a table created beforehand.
	DisableAutoCreate bool
	// Notify, when set, is called once a transaction that wrote events
	// committed: GORM's own, db.Transaction, db.Begin/Commit (it runs in the
	// goroutine that committed). For a transaction begun on a pool the plugin
	// does not wrap (a *gorm.DB handle derived before db.Use that calls Begin
	// itself, another plugin's pool) it is called right after the write, and
	// the relay re-checks at growing intervals until the commit shows. Set it to
	// a relay's Wake in the relay's process, or to a relay.Notifier's Notify in
	// other processes. It must not block. Defaults to nil: the relay finds
	// events by polling.
	Notify func()
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
}

// Validate reports what is wrong with c after defaults are applied: a table name
// that is not one or two plain SQL identifiers, or a payload limit that is
// negative or over [MaxPayloadLimit].
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if _, err := ident.ParseTable(c.Table); err != nil {
		errs = append(errs, fmt.Errorf("invalid Table: %w", err))
	}
	if c.MaxPayloadBytes < 0 || c.MaxPayloadBytes > MaxPayloadLimit {
		errs = append(errs, fmt.Errorf("MaxPayloadBytes is %d, must be positive and at most %d", c.MaxPayloadBytes, MaxPayloadLimit))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("outboxhook: invalid config: %w", err)
	}
	return nil
}
