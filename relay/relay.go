package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/relayhook"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/telemetry"
)

// ErrSQLiteSettings is returned (wrapped) by New for an SQLite connection
// without a busy timeout, immediate transactions (_txlock=immediate) or WAL;
// the message names the DSN to open the file with. It is the same error as
// outboxhook.ErrSQLiteSettings, whose documentation says why each is needed.
var ErrSQLiteSettings = drivers.ErrSQLiteSettings

// ErrMySQLLoc is returned (wrapped) by New for a MySQL connection whose DSN
// has a loc other than UTC; the same error as outboxhook.ErrMySQLLoc.
var ErrMySQLLoc = drivers.ErrMySQLLoc

// Relay moves committed outbox rows to a Watermill publisher, at least once.
type Relay struct {
	cfg     Config
	table   ident.Table
	channel ident.Name // the LISTEN/NOTIFY channel, Config.Channel
	db      *sql.DB
	pub     message.Publisher
	drv     store.Driver     // the database's implementation
	caller  *outbound.Caller // the publish calls to pub
	st      store.Relay      // the outbox table in it
	log     *slog.Logger
	wake    chan struct{}
	leases  *leases // ordered mode only
	m       *metrics
	hooks   testHooks
	health  health // this instance's evidence of outages, for the outage recovery

	failLog, deadLog *topicLimiter // log lines about failed and dead events, per topic

	partitioned atomic.Bool // DropPartitions, and the outbox is partitioned
	schemaOK    atomic.Bool // a Run's schema check passed: a later Run skips it

	// Kept from Run to Run (a fleet runs a tenant's relay again and again):
	hbMade    atomic.Bool  // the instance table is there: a later beat skips its check
	beatAt    atomic.Int64 // unix ns of the last beat that went through (newBeatClock); 0: none yet
	pruner    *pruner      // when the instance table's next prune is due
	cleanNext atomic.Int64 // unix ns when the next cleanup is due; 0: a cleaning interval after Run starts
	fromHead  atomic.Bool  // the next unordered claim reads from the head (a Run's first)
}

// New returns a relay that reads the outbox through db and publishes to pub. It
// checks cfg (a bad config fails here) but does not touch the database: Run does,
// and keeps trying while the database is down. On SQLite, a local file, it asks a
// connection for the settings Herald needs, and fails with ErrSQLiteSettings
// without them. A Watermill publisher set up to return before the broker
// stored a message (watermill-amqp without Publish.ConfirmDelivery,
// watermill-nats on core NATS) is logged as a warning: the relay would mark
// events the broker may lose.
func New(db *gorm.DB, pub message.Publisher, cfg Config) (*Relay, error) {
	names, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	if db == nil || pub == nil {
		return nil, errors.New("relay: db and publisher are required")
	}
	conn, err := drivers.Open(db, "") // the table is parsed: names.table
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if err := drivers.CheckConn(db); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	r := &Relay{
		cfg:     cfg,
		table:   names.table,
		channel: names.channel,
		db:      conn.DB,
		pub:     pub,
		drv:     conn.Driver,
		st:      conn.Driver.Relay(names.table),
		caller:  outbound.NewCaller(pub, cfg.PublishTimeout, telemetry.Tracer(cfg.TracerProvider), cfg.MessagingSystem),
		log:     relayLogger(cfg),
		wake:    make(chan struct{}, 1),
		m:       newMetrics(cfg),

		failLog: newTopicLimiter(30*time.Second, maxLogTopics),
		deadLog: newTopicLimiter(30*time.Second, maxLogTopics),
	}
	r.pruner = r.newPruner()
	r.newBeatClock()
	if cfg.Ordered {
		r.leases = newLeases(r)
	}
	if why := unsafePublisher(pub); why != "" {
		r.log.Warn("relay: the publisher may lose events the broker acknowledged", "why", why)
	}
	return r, nil
}

// relayLogger is cfg's logger with the relay's attributes.
func relayLogger(cfg Config) *slog.Logger {
	l := cfg.Logger.With("component", "herald.relay", "instance", cfg.InstanceID)
	if cfg.Tenant != "" {
		l = l.With("tenant", cfg.Tenant)
	}
	return l
}

// Wake makes the relay look for events now. Call it after committing events in
// the relay's process (outboxhook.Config.Notify); it never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run relays until ctx is cancelled, then finishes or releases the batch in
// flight (within PublishTimeout), lets a heartbeat in flight end (within 5 s)
// and returns nil. Database and broker faults never
// stop it: it logs them, backs off (capped exponential, with jitter) and resumes.
// An outdated schema does: Run returns ErrSchemaOutdated, naming the migration
// to run, before it claims anything. A Relay may Run again once Run returned
// (a fleet.Fleet runs each tenant's relay while it has work); it then skips
// the schema check a Run passed before.
func (r *Relay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	start := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	r.hooks.point, r.hooks.round = relayhook.From(ctx), relayhook.RoundFrom(ctx)
	if g := relayhook.GaugesFrom(ctx); g != nil {
		g.Keep(r.observeOutbox)
	} else {
		defer r.observeOutbox()()
	}
	if !r.schemaOK.Load() { // a Run after a Run does not check again
		if err := r.ensureSchema(ctx); err != nil {
			return err
		}
		r.schemaOK.Store(ctx.Err() == nil)
	}
	caps := r.drv.Caps()
	r.fromHead.Store(caps.Has(store.Position))
	if !r.cfg.DisableListen && caps.Has(store.Listen) {
		start(r.listen)
	}
	if r.cfg.Retention > 0 {
		start(r.cleaner)
	}
	if r.leases != nil {
		start(r.leases.run)
	} else {
		start(r.heartbeat)
	}
	if caps.Has(store.Position) {
		start(r.sweeper)
	}
	r.loop(ctx)
	wg.Wait()
	return nil
}
