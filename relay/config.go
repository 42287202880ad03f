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
)

// Config configures a Relay. The zero value is ready to use.
type Config struct {
	// Table is the outbox table, optionally schema-qualified; it must match the
	// outbox hook's. Defaults to "outbox_messages".
	Table string
	// BatchSize is how many events one cycle claims and publishes. Defaults to 1000.
	BatchSize int
	// PollInterval is how often the relay looks for due events when nothing woke
	// it. Wake-ups (Wake, LISTEN/NOTIFY) carry the speed; polling is the fallback,
	// and also what picks up events whose retry time came. Defaults to 1s.
	PollInterval time.Duration
	// PublishTimeout bounds one Publish call; a publisher that has not returned by
	// then counts as failed. Defaults to 10s.
	PublishTimeout time.Duration
	// PublishConcurrency is how many Publish calls run at once within a batch:
	// chunks of one topic in unordered mode, aggregates in ordered mode. Defaults to 8.
	PublishConcurrency int
	// Workers is how many batches run at once while there is a backlog (a batch
	// came back full), each in its own transaction; each worker claims its next
	// batch as soon as its last one is marked. In ordered mode each works a
	// disjoint share of the partitions. Defaults to 2.
	Workers int
	// MaxAttempts is how many strikes make an event dead: it is kept, with
	// dead_at set, until requeued. Every failed publish (an error, a panic, or
	// no return within PublishTimeout) is an attempt (the attempts column) and
	// schedules a retry (see MinBackoff). It is also a strike (the strikes
	// column) only when it is confirmed: a Publish call of the same batch, in
	// the same process, that started after the failed call returned
	// succeeded, so the publisher worked after the failure and the failure is
	// the event's own. Only this process's monotonic clock decides that; the
	// application's and the database's clocks are never compared. Hence:
	//
	//   - A broker outage adds no strike, however long, whenever it begins
	//     (before, during or between batches), in both modes and with any
	//     number of instances (each trusts only its own calls); only an
	//     outage that ends within the batch an event failed in can confirm
	//     that failure: at most one strike per failed call.
	//   - A failing event dies no sooner than its backoff schedule allows:
	//     its MaxAttempts-th failure comes about RetryHorizon after its first
	//     (at least half of it, with jitter; only an outage's recovery, see
	//     MinBackoff, can bring a retry of it forward, once per outage).
	//   - A failure nothing confirms is retried every MaxBackoff, for ever:
	//     a topic the broker refuses while no other traffic flows, a hang
	//     that leaves its batch no time to publish after it (an unordered
	//     batch starts no call later than 2 PublishTimeouts after its claim,
	//     and a hang costs two). Stats.Failing and herald_outbox_failing count
	//     such events, OldestPending ages, and the log names the topic.
	//
	// In ordered mode the layers of a batch publish one after the other, so a
	// success in a later layer confirms the failures of earlier ones; in
	// unordered mode a failed chunk is retried one event at a time, so the
	// events published after a failing one confirm it. Rows that cannot be
	// decoded die at once. Defaults to 12.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the wait before retrying a failed event:
	// after its n-th failed attempt it waits MinBackoff·2^(n-1), capped at
	// MaxBackoff, with jitter (between half and all of it), from the moment
	// the database recorded the failure. Nothing makes a retry due earlier,
	// whatever other events do, but the recovery from an outage: when at
	// least two batches in a row of this instance failed and published
	// nothing, and one of their failures was an event's first attempt, the
	// first batch that publishes again makes due the retries of the events
	// that failed since that streak began, for each topic and event type that
	// batch (or a later one, within MaxBackoff) publishes. A refused topic or
	// type is never recovered by other traffic. Defaults to 1s and 5m: with
	// 12 attempts the retry horizon (RetryHorizon) is 18.5 minutes.
	MinBackoff, MaxBackoff time.Duration
	// Retention keeps published events for this long (processed_at set) before a
	// cleaner deletes them. Defaults to 0: an event is deleted as soon as the broker
	// acknowledged it. Deleting at once keeps the table and its index small, which
	// is what keeps the relay fast; the events are in the broker, and failures stay
	// in the table as dead events. Set a retention (say 72h) to keep published
	// events for diagnosis or replay, at the cost of an UPDATE instead of a DELETE
	// and a cleaner's work.
	Retention time.Duration
	// SweepInterval is how often the relay sweeps, where its claims start
	// from a remembered position (PostgreSQL). A claim there does not start
	// at the head of the outbox's index, where the entries of published rows
	// lie until vacuum removes them (and, while any transaction holds back
	// vacuum's horizon, stay: every claim from the head would walk them all),
	// but after the last event it claimed, less what may still commit below
	// it. The sweep, in a cycle of its own, finds what comes back below the
	// position in ways the claims cannot see: events another instance
	// claimed and released by dying, events requeued by another process in
	// a long transaction (unordered mode: it claims a batch from the head;
	// ordered mode: it looks for due events below the positions of its
	// partitions and lowers them). A sweep walks the dead entries the claims
	// skip, so the next waits at least 200 times as long as the last one's
	// scan took: sweeping takes at most 0.5% of the database's time.
	// Publishing what a sweep found does not count: the next sweep starts at
	// most max(SweepInterval, 200 × the last scan) after the last one ended,
	// however slow the broker.
	// Defaults to 1s.
	SweepInterval time.Duration
	// DropPartitions (PostgreSQL) enforces Retention by dropping whole
	// partitions instead of deleting rows: the outbox is a table partitioned
	// by occurred_at into ranges PartitionInterval wide (Setup or Run creates
	// it so when missing; the migrations have the same as a variant), the
	// cleaner creates the ranges ahead of time and drops a partition once its
	// range ended more than Retention ago and every event in it was published
	// more than Retention ago. Dropping a partition removes its rows at once,
	// with nothing for vacuum to do, however many there are; but it takes an
	// ACCESS EXCLUSIVE lock on the outbox for a moment, and so does creating
	// a partition (each waits at most 200 ms for transactions that read,
	// write or claim from the table, such as a pg_dump, while those that come
	// after wait behind it; retried at the next cleanup when it times out), a pending
	// or dead event keeps its whole partition (and is deleted with it only
	// once published, or purged), events whose occurred_at is outside every
	// range (more than a range ahead of the database's clock, or in a range
	// already dropped) go to a default partition cleaned row by row, and the
	// key is (id, occurred_at). Requires Retention > 0 and a Table name of
	// at most 46 bytes (the partitions' names add 17 to it). An outbox that is not
	// partitioned is cleaned row by row, with a warning. Defaults to false.
	DropPartitions bool
	// PartitionInterval is the width of a partition's occurred_at range with
	// DropPartitions: at least 1s, aligned on multiples of it (a day's at UTC
	// midnight). Defaults to 24h.
	PartitionInterval time.Duration
	// CleanupInterval is how often the cleaner runs when Retention > 0. Defaults to 1m.
	CleanupInterval time.Duration
	// CleanupBatch is how many rows one cleaner DELETE removes. Defaults to 1000.
	CleanupBatch int

	// Ordered publishes the events of each aggregate in commit order, whatever the
	// number of relay instances: aggregates are hashed into Partitions, each leased
	// to one instance at a time; a failing event holds back only the later events
	// of its own aggregate (dead events release them). Defaults to false
	// (unordered: any instance claims any due event with FOR UPDATE SKIP LOCKED,
	// the highest throughput).
	Ordered bool
	// Partitions is the number of ordering partitions. All instances must agree.
	// Defaults to 64.
	Partitions int
	// LeaseDuration is how long a partition lease lasts without renewal; a dead
	// instance's partitions are taken over after it. Renewed every third of it.
	// Must be at least 3 times PublishTimeout. Defaults to 30s.
	LeaseDuration time.Duration
	// InstanceID names this relay instance in leases. Defaults to host-pid-random.
	InstanceID string

	// Channel is the PostgreSQL LISTEN/NOTIFY channel the relay listens on for
	// wake-ups from other processes (see Notifier). Defaults to "herald_outbox".
	Channel string
	// DisableListen turns LISTEN off: the relay wakes only through Wake and polling.
	DisableListen bool

	// Logger receives the relay's logs. Defaults to slog.Default().
	Logger *slog.Logger

	// TracerProvider makes the producer spans the relay publishes each event
	// in: "publish <topic>", kind producer, parented to the trace context of
	// the request that saved the event (stored with it by the outbox hook), with
	// the messaging attributes (system, destination, message id); the span is
	// injected into the message (traceparent/tracestate) for the consumer.
	// Defaults to the global provider (otel.GetTracerProvider), a no-op until
	// the application installs an SDK.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the relay's metrics (see Relay.Stats for the
	// figures): herald.relay.published, herald.relay.failed, herald.relay.dead
	// (counters), herald.relay.publish.duration (histogram, seconds), and the
	// gauges herald.outbox.pending, herald.outbox.failing, herald.outbox.dead
	// and herald.outbox.oldest_pending_age (seconds), all with a table
	// attribute. Through OpenTelemetry's Prometheus exporter they read
	// herald_relay_published_total, herald_outbox_pending, ... Defaults to the
	// global provider (otel.GetMeterProvider), a no-op until the application
	// installs an SDK.
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
	// DefaultChannel is the default LISTEN/NOTIFY channel.
	DefaultChannel = "herald_outbox"
)

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = "outbox_messages"
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

// Validate reports what is wrong with c after defaults are applied.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	if t, err := ident.ParseTable(c.Table); err != nil {
		errs = append(errs, fmt.Errorf("invalid Table: %w", err))
	} else if c.DropPartitions {
		if err := t.CheckPartitioned(); err != nil {
			errs = append(errs, fmt.Errorf("invalid Table for DropPartitions: %w", err))
		}
	}
	if _, err := ident.ParseName(c.Channel); err != nil {
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
		return fmt.Errorf("relay: invalid config: %w", err)
	}
	return nil
}

// RetryHorizon is the sum of the un-jittered backoffs of MaxAttempts-1
// retries: how long after its first failure an event whose failures are all
// confirmed makes its last attempt and dies (jitter makes it between half and
// all of this). Events whose failures are not confirmed (see MaxAttempts) are
// retried beyond it, every MaxBackoff. An inbox must keep message ids longer
// than this (plus the time a broker may hold a redelivery) to catch the
// duplicates of retries; a publish that reached the broker but was reported
// failed during a longer outage is published again when the broker is back,
// later than that.
func (c Config) RetryHorizon() time.Duration {
	c.setDefaults()
	var total time.Duration
	for n := 1; n < c.MaxAttempts; n++ {
		total += backoff(c.MinBackoff, c.MaxBackoff, n)
	}
	return total
}

// backoff is the un-jittered wait after the n-th failure (n >= 1).
func backoff(minB, maxB time.Duration, n int) time.Duration {
	d := minB
	for i := 1; i < n; i++ {
		d *= 2
		if d >= maxB {
			return maxB
		}
	}
	return min(d, maxB)
}
