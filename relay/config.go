package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Config configures a Relay. The zero value is ready to use. The package
// documentation explains retries and death, the modes, sweeps, retention by
// partition drop and telemetry at length; each field here ends with its
// default.
type Config struct {
	// Table is the outbox table, optionally schema-qualified; it must match
	// the outbox hook's. Defaults to "outbox_messages" (DefaultTable).
	Table string
	// BatchSize is how many events one cycle claims and publishes.
	// Defaults to 1000.
	BatchSize int
	// PollInterval is how often the relay looks for due events when nothing
	// woke it: the fallback of wake-ups (Wake, LISTEN/NOTIFY), and what picks
	// up events whose retry time came. Defaults to 1s.
	PollInterval time.Duration
	// PublishTimeout bounds one Publish (or PublishBatch) call; a publisher
	// that has not returned by then counts as failed. Defaults to 10s.
	PublishTimeout time.Duration
	// PublishConcurrency is how many Publish calls run at once within a
	// batch: chunks of one topic in unordered mode, aggregates in ordered
	// mode. Defaults to 8.
	PublishConcurrency int
	// Workers is how many batches run at once while there is a backlog (a
	// batch came back full), each in its own transaction; in ordered mode each
	// works a disjoint share of the partitions. Defaults to 2.
	Workers int
	// MaxAttempts is how many strikes (confirmed failures, see "Retries and
	// death" in the package documentation) make an event dead, for the
	// default retry policy. Every failed publish is an attempt; only a
	// confirmed one is a strike, so a broker outage kills nothing; rows that
	// cannot be decoded die at once. Defaults to 12.
	MaxAttempts int
	// Confirmer, when set, confirms failures too: a failure is also a strike
	// when Confirmer saw a publish call succeed that began after the failed
	// call returned, in this process. Set it to the WAL relay
	// (walrelay.Relay) that parks refused events in this relay's table and
	// shares its publisher: the table then holds little else, and nothing in
	// its own batches would confirm a refusal that does not wrap
	// ErrRejected. A batch with failures nothing else confirmed waits up
	// to 500ms (at most PublishTimeout) for the Confirmer before it marks
	// them (in unordered mode its claim's row locks are held that much
	// longer). Defaults to nil: only this relay's own calls confirm.
	Confirmer Confirmer
	// MinBackoff and MaxBackoff bound the default retry policy's wait before
	// retrying a failed event: after its n-th failed attempt it waits
	// MinBackoff·2^(n-1), capped at MaxBackoff, jittered between half and all
	// of it, from the moment the database recorded the failure (see
	// DefaultRetryPolicy). MaxBackoff is also the window of the outage
	// recovery (see the package documentation), whatever the policy. With 12
	// attempts the defaults make a retry horizon (RetryHorizon) of 18.5
	// minutes. Defaults to 1s and 5m.
	MinBackoff, MaxBackoff time.Duration
	// RetryPolicy decides, for each failed publish, whether the event dies
	// and when it is retried (see RetryPolicy); with one set, MaxAttempts and
	// MinBackoff are not used. Defaults to DefaultRetryPolicy with
	// MaxAttempts, MinBackoff and MaxBackoff.
	RetryPolicy RetryPolicy
	// Retention keeps published events for this long (processed_at set)
	// before a cleaner deletes them; 0 deletes an event as soon as the broker
	// acknowledged it, which keeps the table and its index small, and so the
	// relay fast. Set one (say 72h) to keep published events for diagnosis or
	// replay, at the cost of an UPDATE instead of a DELETE and a cleaner's
	// work. Defaults to 0.
	Retention time.Duration
	// SweepInterval is how often the relay sweeps, where its claims start
	// from a remembered position (PostgreSQL): the sweep finds what comes
	// back below the position in ways the claims cannot see (see "Sweeps" in
	// the package documentation). The next sweep waits at least 200 times as
	// long as the last one's scan took. Defaults to 1s.
	SweepInterval time.Duration
	// DropPartitions (PostgreSQL) enforces Retention by dropping whole
	// partitions of an outbox partitioned by occurred_at instead of deleting
	// rows (see "Retention by partition drop" in the package documentation).
	// Requires Retention > 0 and a Table name of at most 46 bytes.
	// Defaults to false.
	DropPartitions bool
	// PartitionInterval is the width of a partition's occurred_at range with
	// DropPartitions: at least 1s, aligned on multiples of it (a day's at UTC
	// midnight). Defaults to 24h.
	PartitionInterval time.Duration
	// CleanupInterval is how often the cleaner runs when Retention > 0.
	// Defaults to 1m.
	CleanupInterval time.Duration
	// CleanupBatch is how many rows one cleaner DELETE removes.
	// Defaults to 1000.
	CleanupBatch int

	// Ordered publishes the events of each aggregate in commit order, whatever
	// the number of relay instances: aggregates are hashed into Partitions,
	// each leased to one instance at a time; a failing event holds back only
	// the later events of its own aggregate (see "Modes" in the package
	// documentation). Unordered, any instance claims any due event, for the
	// highest throughput. Defaults to false.
	Ordered bool
	// Partitions is the number of ordering partitions; all instances must
	// agree. Defaults to 64.
	Partitions int
	// LeaseDuration is how long a partition lease lasts without renewal; a
	// dead instance's partitions are taken over after it. Renewed every third
	// of it; must be at least 3 times PublishTimeout. Defaults to 30s.
	LeaseDuration time.Duration
	// InstanceID names this relay instance in leases.
	// Defaults to host-pid-random.
	InstanceID string

	// Channel is the PostgreSQL LISTEN/NOTIFY channel the relay listens on
	// for wake-ups from other processes (see Notifier).
	// Defaults to "herald_outbox" (DefaultChannel).
	Channel string
	// DisableListen turns LISTEN off: the relay wakes only through Wake and
	// polling. Defaults to false.
	DisableListen bool

	// Tenant names the tenant whose outbox this relay reads: every message
	// it publishes carries it in its metadata (events.MetaTenant), and its
	// logs carry it as the attribute "tenant". A fleet.Fleet sets it for each
	// of its tenants. Defaults to empty: none.
	Tenant string
	// TenantMetrics adds the tenant (Tenant) to the relay's metrics as the
	// attribute "tenant". Without it a relay with a Tenant observes no
	// outbox gauges (herald.outbox.*: the tenants of a fleet would overwrite
	// each other's), and its counters add up with other tenants'. Defaults
	// to false: a fleet of thousands of tenants would make thousands of
	// series (fleet.Config.TenantMetrics caps them).
	TenantMetrics bool

	// Logger receives the relay's logs. Defaults to slog.Default().
	Logger *slog.Logger

	// TracerProvider makes the producer span each event is published in,
	// parented to the trace of the request that saved it and injected into
	// the message (see "Telemetry" in the package documentation).
	// Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the relay's metrics (see "Telemetry" in the package
	// documentation). Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// MessagingSystem is the messaging.system attribute of the relay's spans
	// ("nats", "rabbitmq", "kafka", ...). Defaults to empty: left out.
	MessagingSystem string
}

const (
	defaultBatchSize   = 1000
	defaultPoll        = time.Second
	defaultPubTimeout  = 10 * time.Second
	defaultConcurrency = 8
	defaultMaxAttempts = 12
	defaultWorkers     = 2
	defaultMinBackoff  = time.Second
	defaultMaxBackoff  = 5 * time.Minute
	defaultCleanupInt  = time.Minute
	defaultSweep       = time.Second
	defaultPartInt     = 24 * time.Hour
	defaultCleanupN    = 1000
	defaultPartitions  = 64
	defaultLease       = 30 * time.Second
	// DefaultChannel is the default LISTEN/NOTIFY channel, "herald_outbox".
	DefaultChannel = store.DefaultChannel
	// DefaultTable is the default outbox table, "outbox_messages" (the outbox
	// hook's outboxhook.DefaultTable).
	DefaultTable = store.DefaultOutbox
)

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	setDefault(&c.BatchSize, defaultBatchSize)
	setDefault(&c.PollInterval, defaultPoll)
	setDefault(&c.PublishTimeout, defaultPubTimeout)
	setDefault(&c.PublishConcurrency, defaultConcurrency)
	setDefault(&c.Workers, defaultWorkers)
	setDefault(&c.MaxAttempts, defaultMaxAttempts)
	setDefault(&c.MinBackoff, defaultMinBackoff)
	setDefault(&c.MaxBackoff, defaultMaxBackoff)
	setDefault(&c.CleanupInterval, defaultCleanupInt)
	setDefault(&c.SweepInterval, defaultSweep)
	setDefault(&c.PartitionInterval, defaultPartInt)
	setDefault(&c.CleanupBatch, defaultCleanupN)
	setDefault(&c.Partitions, defaultPartitions)
	setDefault(&c.LeaseDuration, defaultLease)
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), events.NewID().String()[24:])
	}
	if c.Channel == "" {
		c.Channel = DefaultChannel
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// WithDefaults returns c with every field left unset at its default, as New
// applies them (InstanceID a new name each call).
func (c Config) WithDefaults() Config {
	c.setDefaults()
	return c
}

// Validate reports what is wrong with c after defaults are applied.
func (c Config) Validate() error {
	_, err := c.parse()
	return err
}

// parsed are the names of a Config, parsed (New keeps them on the Relay).
type parsed struct {
	table   ident.Table
	channel ident.Name
}

// parse applies c's defaults, checks c and returns its names parsed: New
// calls it and keeps them; Validate calls it on a copy.
func (c *Config) parse() (parsed, error) {
	c.setDefaults()
	var (
		p    parsed
		errs []error
		err  error
	)
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	if p.table, err = ident.ParseTable(c.Table); err != nil {
		errs = append(errs, fmt.Errorf("invalid Table: %w", err))
	} else if c.DropPartitions {
		if err := p.table.CheckPartitioned(); err != nil {
			errs = append(errs, fmt.Errorf("invalid Table for DropPartitions: %w", err))
		}
	}
	if p.channel, err = ident.ParseName(c.Channel); err != nil {
		errs = append(errs, fmt.Errorf("invalid Channel: %w", err))
	}
	check(c.BatchSize > 0, "BatchSize is %d, must be positive", c.BatchSize)
	check(c.PollInterval > 0, "PollInterval is %v, must be positive", c.PollInterval)
	check(c.PublishTimeout > 0, "PublishTimeout is %v, must be positive", c.PublishTimeout)
	check(c.PublishConcurrency > 0, "PublishConcurrency is %d, must be positive", c.PublishConcurrency)
	check(c.Workers > 0, "Workers is %d, must be positive", c.Workers)
	check(c.MaxAttempts > 0, "MaxAttempts is %d, must be positive", c.MaxAttempts)
	check(c.MinBackoff > 0 && c.MaxBackoff >= c.MinBackoff, "backoff %v..%v: need 0 < MinBackoff <= MaxBackoff", c.MinBackoff, c.MaxBackoff)
	check(c.Retention >= 0, "Retention is %v, must not be negative", c.Retention)
	check(c.CleanupInterval > 0 && c.CleanupBatch > 0, "CleanupInterval and CleanupBatch must be positive")
	check(c.SweepInterval > 0, "SweepInterval is %v, must be positive", c.SweepInterval)
	check(!c.DropPartitions || c.Retention > 0, "DropPartitions needs a Retention")
	check(c.PartitionInterval >= time.Second, "PartitionInterval is %v, must be at least 1s", c.PartitionInterval)
	check(c.Partitions > 0, "Partitions is %d, must be positive", c.Partitions)
	check(!c.Ordered || c.LeaseDuration >= 3*c.PublishTimeout,
		"LeaseDuration %v must be at least 3 times PublishTimeout %v", c.LeaseDuration, c.PublishTimeout)
	if err := errors.Join(errs...); err != nil {
		return parsed{}, fmt.Errorf("relay: invalid config: %w", err)
	}
	return p, nil
}

// RetryHorizon is the sum of the un-jittered backoffs of MaxAttempts-1
// retries (DefaultRetryPolicy.Horizon; with another RetryPolicy, its own
// Horizon() when it has one, else the default policy's): how long after its first failure an event whose failures are all
// confirmed makes its last attempt and dies (jitter makes it between half and
// all of this). Events whose failures are not confirmed (see MaxAttempts) are
// retried beyond it, every MaxBackoff. An inbox must keep message ids longer
// than this (plus the time a broker may hold a redelivery) to catch the
// duplicates of retries; a publish that reached the broker but was reported
// failed during a longer outage is published again when the broker is back,
// later than that.
func (c Config) RetryHorizon() time.Duration {
	c.setDefaults()
	if p, ok := c.RetryPolicy.(interface{ Horizon() time.Duration }); ok {
		return p.Horizon()
	}
	return c.defaultRetryPolicy().Horizon()
}
