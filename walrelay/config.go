package walrelay

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/relay"
)

// Defaults of Config.
const (
	// DefaultSlot is the default Config.Slot: "herald".
	DefaultSlot = "herald"
	// DefaultPublication is the default Config.Publication: "herald".
	DefaultPublication = "herald"
	// DefaultPublishTimeout is the default Config.PublishTimeout: 10s.
	DefaultPublishTimeout = 10 * time.Second
	// DefaultRetryInterval is the default Config.RetryInterval: 1s.
	DefaultRetryInterval = time.Second
	// DefaultStatusInterval is the default Config.StatusInterval: 10s.
	DefaultStatusInterval = 10 * time.Second
	// DefaultTable is the default Config.Table: "outbox_messages", the
	// table relay's (relay.DefaultTable).
	DefaultTable = relay.DefaultTable
	// DefaultMaxHeld is the default Config.MaxHeld: 1000.
	DefaultMaxHeld = 1000
	// DefaultBatchSize is the default Config.BatchSize: 500.
	DefaultBatchSize = 500
)

// Config configures a Relay. The zero value is ready to use; each field
// ends with its default.
type Config struct {
	// Slot is the logical replication slot the relay streams, created
	// (with pgoutput) when missing. One relay reads a slot at a time.
	// Lowercase letters, digits and underscores, at most 63. Defaults to
	// "herald" (DefaultSlot).
	Slot string
	// Publication is the publication named to pgoutput, created with no
	// tables when missing. Same syntax as Slot. Defaults to "herald"
	// (DefaultPublication).
	Publication string
	// Prefix is the prefix of the logical messages the relay publishes; it
	// must match outboxhook's Config.WALPrefix. Messages with other
	// prefixes are skipped. Defaults to "herald"
	// (outboxhook.DefaultWALPrefix).
	Prefix string
	// PublishTimeout bounds one publish call (Publish, or PublishBatch,
	// whose context is done then), of one or more events; a call that has
	// not returned by then counts as failed for each of them, and they are
	// published again. Defaults to 10s (DefaultPublishTimeout).
	PublishTimeout time.Duration
	// RetryInterval is the wait after a failed publish, or a lost
	// connection, before trying again. Defaults to 1s
	// (DefaultRetryInterval).
	RetryInterval time.Duration
	// StatusInterval is how often the relay reports its confirmed position
	// to the server (it also does when the server asks, and when Run
	// returns). Defaults to 10s (DefaultStatusInterval).
	StatusInterval time.Duration
	// Table is the outbox table (optionally schema-qualified) the relay
	// parks the events the broker refuses in, as ordinary rows that a table
	// relay (relay.New on the same table) retries and dead-letters; created
	// when missing. Defaults to "outbox_messages" (DefaultTable).
	Table string
	// Ordered keeps each aggregate's events in commit order across parking:
	// while an aggregate has events in Table that are neither published nor
	// dead, the relay parks its later events there too, behind them, and
	// publishes them from the WAL again once none is left. The table relay
	// must run with relay.Config.Ordered for the parked ones to keep their
	// order. Defaults to false: a parked event holds back nothing.
	Ordered bool
	// MaxHeld is how many events the relay keeps in memory while their
	// publish failed and the failure is not yet told to be the event's own
	// (the broker may be down) or, in ordered mode, wait behind such an
	// event of their aggregate: at that many it reads no further from the
	// slot until some are published or parked (beyond them, what the
	// relay read ahead stays in memory too: at most 64 chunks of the
	// stream, a transaction or at most 64 of its events each). Defaults to
	// 1000 (DefaultMaxHeld).
	MaxHeld int
	// Parked, when set, is the configuration of a table relay (relay.New)
	// that the relay runs itself over Table while it streams the slot, with
	// itself as the table relay's Confirmer: it retries and dead-letters
	// the events parked there. With several relays on one slot (one streams,
	// the others wait to take over) only the streaming one runs it, so that
	// its publishes confirm every parked failure; a table relay run beside
	// each, as the alternative, confirms nothing while its process's relay
	// waits. Its Table and Ordered must be unset or match this Config's,
	// its Confirmer unset; it connects with the relay's DSN, on a pool of
	// its own of at most 4 connections, opened when the stream starts and
	// closed when it ends; its Logger and MeterProvider, when unset, are
	// this Config's. Defaults to nil: run a table relay on Table yourself,
	// with this relay as its Confirmer.
	Parked *relay.Config
	// BatchSize is at most how many events one publish call carries. The
	// relay reads and decodes the stream ahead of the publisher, and when
	// several events are already there (a backlog, a transaction of many
	// events, a burst) it publishes up to BatchSize of them at once, in
	// stream order: with PublishBatch when the publisher is a
	// relay.BatchPublisher, else with one Publish call per run of events
	// of one topic. It never waits for more events to fill a call. In
	// ordered mode a call carries at most one event of each aggregate (the
	// next one of an aggregate goes in the next call). 1 publishes every
	// event in a call of its own. Defaults to 500 (DefaultBatchSize).
	BatchSize int
	// RecreateLostSlot lets Setup and Run make the slot again when it
	// existed and is gone (dropped, or lost in a failover to a standby,
	// which has no slots before PostgreSQL 17's failover slots) or was
	// invalidated by the server, at the current end of the WAL, logging at
	// Error the positions between which events may never be published
	// (the last position known confirmed and the new slot's start).
	// Defaults to false: Run stops with a SlotLostError (wrapping ErrSlot)
	// and the operator decides; to start afresh once, run herald wal
	// recreate (RecreateSlot) rather than leave this set, which would let
	// a later loss pass with nothing but a log line.
	RecreateLostSlot bool
	// Logger receives the relay's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// MeterProvider makes the relay's publish metrics: the counters
	// herald.wal.published, herald.wal.failed and herald.wal.parked and
	// the histogram herald.wal.publish.duration, with a slot attribute (see
	// "Telemetry" in the package documentation). Defaults to
	// otel.GetMeterProvider(), a no-op until the application installs an
	// SDK.
	MeterProvider metric.MeterProvider
	// TracerProvider makes the producer span each event is published in,
	// parented to the trace of the request that saved it and injected into
	// the message, as the table relay does (relay.Config.TracerProvider).
	// Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MessagingSystem is the messaging.system attribute of the relay's spans
	// ("nats", "rabbitmq", "kafka", ...). Defaults to empty: left out.
	MessagingSystem string
}

func (c *Config) setDefaults() {
	if c.Slot == "" {
		c.Slot = DefaultSlot
	}
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	if c.Prefix == "" {
		c.Prefix = store.DefaultWALPrefix // outboxhook.DefaultWALPrefix
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.MaxHeld == 0 {
		c.MaxHeld = DefaultMaxHeld
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Parked != nil {
		p := *c.Parked
		if p.Table == "" {
			p.Table = c.Table
		}
		p.Ordered = p.Ordered || c.Ordered
		if p.Logger == nil {
			p.Logger = c.Logger
		}
		if p.MeterProvider == nil {
			p.MeterProvider = c.MeterProvider
		}
		c.Parked = &p
	}
}

var name = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// Validate reports what is wrong with c after defaults are applied: a Slot
// or Publication that is not lowercase letters, digits and underscores (at
// most 63), an invalid Table, a negative duration, MaxHeld or BatchSize.
func (c Config) Validate() error {
	_, err := c.parse()
	return err
}

// parse applies c's defaults, checks c (Validate) and returns its Table
// parsed: New, Setup, RecreateSlot and Drop call it once and keep what it
// made; Validate calls it on a copy.
func (c *Config) parse() (ident.Table, error) {
	c.setDefaults()
	var errs []error
	if !name.MatchString(c.Slot) {
		errs = append(errs, fmt.Errorf("invalid Slot %q: lowercase letters, digits and underscores, at most 63", c.Slot))
	}
	if !name.MatchString(c.Publication) {
		errs = append(errs, fmt.Errorf("invalid Publication %q: lowercase letters, digits and underscores, at most 63", c.Publication))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"PublishTimeout", c.PublishTimeout}, {"RetryInterval", c.RetryInterval}, {"StatusInterval", c.StatusInterval}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s is %v, must be positive", d.name, d.v))
		}
	}
	table, err := ident.ParseTable(c.Table)
	if err != nil {
		errs = append(errs, fmt.Errorf("invalid Table: %w", err))
	}
	if c.MaxHeld < 0 {
		errs = append(errs, fmt.Errorf("MaxHeld is %d, must be positive", c.MaxHeld))
	}
	if c.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("BatchSize is %d, must be positive", c.BatchSize))
	}
	if p := c.Parked; p != nil {
		pt, perr := ident.ParseTable(p.Table)
		if err == nil && perr == nil && pt.String() != table.String() {
			errs = append(errs, fmt.Errorf("invalid Parked: its Table %q is not Table %q", p.Table, c.Table))
		}
		if p.Ordered != c.Ordered {
			errs = append(errs, errors.New("invalid Parked: its Ordered is set, Ordered is not (a parked aggregate's later events would not wait behind it)"))
		}
		if p.Confirmer != nil {
			errs = append(errs, errors.New("invalid Parked: its Confirmer is set (the relay confirms the parked relay's failures itself)"))
		}
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("invalid Parked: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ident.Table{}, fmt.Errorf("walrelay: invalid config: %w", err)
	}
	return table, nil
}
