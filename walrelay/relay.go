package walrelay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the relay's pools
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/telemetry"
	"github.com/heraldgo/herald/publish"
	"github.com/heraldgo/herald/relay"
)

// Errors Setup and Run return, wrapped, for what no retry can fix.
var (
	// ErrWALLevel is returned when the server's wal_level is not logical:
	// set wal_level = logical (postgresql.conf, or ALTER SYSTEM SET
	// wal_level = logical) and restart PostgreSQL. It is the same error as
	// outboxhook.ErrWALLevel.
	ErrWALLevel = store.ErrWALLevel
	// ErrReplicationRight is returned when the relay's role may not stream
	// a slot: grant it (ALTER ROLE name REPLICATION) or connect as one that
	// may.
	ErrReplicationRight = errors.New("walrelay: the role lacks the REPLICATION right (ALTER ROLE ... REPLICATION)")
	// ErrSlot is returned for a slot the relay cannot stream: made with
	// another output plugin than pgoutput, for another database, or lost
	// (a *SlotLostError): invalidated by the server (wal_status lost: it
	// removed WAL the slot needed, and events in it are gone), or gone
	// after it existed (dropped, or a failover to a standby, which has no
	// slots). The relay stops rather than skip: it never makes a slot that
	// existed again on its own (RecreateSlot, herald wal recreate, or
	// Config.RecreateLostSlot start afresh).
	ErrSlot = errors.New("walrelay: replication slot unusable")
	// ErrPublishTimeout is [publish.ErrPublishTimeout], as relay.ErrPublishTimeout.
	ErrPublishTimeout = publish.ErrPublishTimeout
)

// Relay publishes the events outboxhook wrote in the WAL (StorageWAL) from
// a replication slot. Its methods are safe to call from one goroutine. One
// Relay streams a slot at a time: others on the same slot (in other
// processes, for failover) wait to take over (see Run).
type Relay struct {
	dsn     string
	pub     message.Publisher
	cfg     Config // defaults applied
	log     *slog.Logger
	table   ident.Table   // Config.Table, parsed: where refused events are parked
	drv     store.Driver  // the database's implementation
	wal     store.WAL     // and its WAL
	outbox  store.Outbox  // the table's rows: the driver's Insert
	parking store.Parking // and its mark of failures, its pending aggregates

	m *counters

	caller *outbound.Caller  // the publish calls to pub
	ok     outbound.Evidence // its calls that acknowledged a message

	slotMu   sync.Mutex
	slotSeen bool      // Setup found or made the slot, or a stream read it
	slotLSN  store.LSN // the last position seen confirmed
}

// New returns a relay that streams the database of dsn (a PostgreSQL URL or
// keyword/value string; the relay adds replication=database for its
// streaming connection) and publishes to pub. It checks cfg and dsn but
// does not connect: Run does.
func New(dsn string, pub message.Publisher, cfg Config) (*Relay, error) {
	if pub == nil {
		return nil, errors.New("walrelay: nil publisher")
	}
	r, err := newRelay(dsn, cfg)
	if err != nil {
		return nil, err
	}
	if err := r.wal.CheckDSN(dsn); err != nil {
		return nil, fmt.Errorf("walrelay: parse dsn: %w", err)
	}
	r.pub = pub
	r.caller = outbound.NewCaller(pub, r.cfg.PublishTimeout, telemetry.Tracer(r.cfg.TracerProvider), r.cfg.MessagingSystem)
	r.m = newCounters(r.cfg.MeterProvider, r.cfg.Slot)
	return r, nil
}

// newRelay is the relay of cfg on the database of dsn, with no publisher:
// what New completes, and what Setup and RecreateSlot set up. It parses cfg
// (Config.parse), once.
func newRelay(dsn string, cfg Config) (*Relay, error) {
	table, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	drv, w, err := walDriver()
	if err != nil {
		return nil, err
	}
	return &Relay{dsn: dsn, cfg: cfg, log: cfg.Logger.With("slot", cfg.Slot), table: table,
		drv: drv, wal: w, outbox: drv.Outbox(table), parking: w.Parking(table)}, nil
}

// Config returns the relay's configuration, defaults applied.
func (r *Relay) Config() Config { return r.cfg }

// SucceededSince reports whether a Publish call of the relay that began at t
// or later succeeded: a relay.Relay on the table this relay parks refused
// events in, with the same publisher, takes it as its Config.Confirmer, so
// that the WAL's traffic confirms the refusals of the events parked there.
// Safe for concurrent use.
func (r *Relay) SucceededSince(t time.Time) bool { return r.ok.SucceededSince(t) }

// The relay's database is PostgreSQL (New takes its DSN): its pools are
// pgx's, its driver the one internal/drivers picks for GORM's PostgreSQL
// dialector, the one the parked relay (Config.Parked) opens its pool with.
// Everything else goes through that driver (store.WAL).

// walDriver returns the driver of the relay's database and its WAL.
func walDriver() (store.Driver, store.WAL, error) {
	drv, err := drivers.ForDialector(gormpg.New(gormpg.Config{}))
	if err != nil {
		return nil, nil, fmt.Errorf("walrelay: %w", err)
	}
	w := drv.WAL()
	if w == nil {
		return nil, nil, fmt.Errorf("walrelay: %w: %s keeps no outbox in its log", store.ErrNotSupported, drv.Name())
	}
	return drv, w, nil
}

// openDB opens a pool on the database of dsn.
func openDB(dsn string) (*sql.DB, error) { return sql.Open("pgx", dsn) }

// dialector is GORM's dialector on db, a pool of the relay's database.
func dialector(db *sql.DB) gorm.Dialector { return gormpg.New(gormpg.Config{Conn: db}) }

// Setup checks that the server can stream the relay's slot (wal_level,
// [ErrWALLevel]; the REPLICATION right, [ErrReplicationRight]) and creates
// the publication, the slot and the outbox table refused events are parked
// in (Config.Table, unpartitioned) when missing, and records the slot in
// SlotMarkerTable (created when missing). A slot that exists and cannot be
// used is an [ErrSlot]; so is one that existed and is gone (its row in
// SlotMarkerTable, or this Relay set it up or streamed it before): a
// [SlotLostError], unless Config.RecreateLostSlot. Run calls it; call it
// beforehand to create the slot before the first event is written: the
// slot keeps only what is written after it was made.
func (r *Relay) Setup(ctx context.Context) error {
	_, err := r.setup(ctx)
	return err
}

// setup is Setup, reporting the slot it made (ensureSlot).
func (r *Relay) setup(ctx context.Context) (rec Recreated, err error) {
	rec.Slot = r.cfg.Slot
	db, err := openDB(r.dsn)
	if err != nil {
		return rec, fmt.Errorf("walrelay: open: %w", err)
	}
	defer func() { _ = db.Close() }()
	if err := r.wal.CheckLevel(ctx, db); err != nil {
		return rec, fmt.Errorf("walrelay: %w", err)
	}
	ok, err := r.wal.ReplicationRight(ctx, db)
	if err != nil {
		return rec, fmt.Errorf("walrelay: check replication right: %w", err)
	}
	if !ok {
		return rec, ErrReplicationRight
	}
	// Before the slot, which would keep the WAL of its DDL (and the
	// aggregate locks it fills).
	ok, err = r.outbox.Exists(ctx, db)
	if err == nil && !ok {
		err = r.outbox.Create(ctx, db)
	}
	if err == nil {
		err = r.outbox.Check(ctx, db)
	}
	if err != nil {
		return rec, fmt.Errorf("walrelay: outbox table %s: %w", r.table, err)
	}
	if err := r.wal.EnsurePublication(ctx, db, r.cfg.Publication); err != nil {
		return rec, fmt.Errorf("walrelay: create publication %s: %w", r.cfg.Publication, err)
	}
	return r.ensureSlot(ctx, db)
}

// Run sets up (Setup) and streams the slot until ctx is cancelled, then
// reports the position confirmed so far to the server and returns nil. A
// lost connection or a failing publisher does not stop it: it logs, waits
// Config.RetryInterval and resumes from the last confirmed position. What
// Setup finds wrong ([ErrWALLevel], [ErrReplicationRight], [ErrSlot]) does:
// Run returns it. A slot that vanishes while Run runs (between two of its
// connections) is such an [ErrSlot] (a [SlotLostError]): Run does not make
// it again.
//
// One relay streams a slot at a time: while another streams it (the server
// says the slot "is active"), Run waits, trying again every
// Config.RetryInterval, logging at Info once and at Debug after, and takes
// over as soon as the other's stream ends.
func (r *Relay) Run(ctx context.Context) error {
	waiting := false
	for {
		var err error
		if !waiting { // while waiting for the slot, Setup did its work
			err = r.Setup(ctx)
		}
		if err == nil {
			err = r.stream(ctx)
		}
		select {
		case <-ctx.Done():
			return nil // cancelled: err is the cancellation's
		default:
		}
		if errors.Is(err, ErrWALLevel) || errors.Is(err, ErrReplicationRight) || errors.Is(err, ErrSlot) {
			return err
		}
		switch active := r.wal.SlotActive(err); {
		case active && !waiting:
			r.log.InfoContext(ctx, "walrelay: slot streamed by another relay; waiting to take over",
				"error", err, "retry_every", r.cfg.RetryInterval)
			waiting = true
		case active:
			r.log.DebugContext(ctx, "walrelay: slot still streamed by another relay", "error", err)
		default:
			waiting = false
			r.log.WarnContext(ctx, "walrelay: streaming failed; retrying", "error", err, "retry_in", r.cfg.RetryInterval)
		}
		if !sleep(ctx, r.cfg.RetryInterval) {
			return nil
		}
	}
}

// stream streams the slot on a replication connection of its own until ctx
// is cancelled or the connection fails: the reader (stream.go) reads and
// decodes ahead while the session takes what it read (follow); the parked
// relay (Config.Parked) runs meanwhile.
func (r *Relay) stream(ctx context.Context) error {
	st, err := r.wal.Stream(ctx, store.StreamParams{DSN: r.dsn, Slot: r.cfg.Slot, Publication: r.cfg.Publication, Prefix: r.cfg.Prefix})
	if err != nil {
		return fmt.Errorf("walrelay: %w", err)
	}
	defer func() { _ = st.Close(context.WithoutCancel(ctx)) }()
	db, err := openDB(r.dsn)
	if err != nil {
		return fmt.Errorf("walrelay: open: %w", err)
	}
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(2)
	s := &session{r: r, db: db, c: r.caller, pendingAggs: map[string]bool{}}
	if err := s.loadParked(ctx); err != nil {
		return err
	}
	r.log.InfoContext(ctx, "walrelay: streaming")
	if r.cfg.Parked != nil { // its table relay, while this stream lasts
		pctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { r.runParked(pctx) })
		defer func() { stop(); wg.Wait() }()
	}
	// The reader, ahead of the session, while this stream lasts; then the
	// position confirmed last is reported (the reader is done with the
	// connection).
	rd := newReader(st, r.wal, &r.cfg, r.log, &s.pos)
	rctx, stopReading := context.WithCancel(ctx)
	var readers sync.WaitGroup // the reader and its decoders
	readers.Go(func() { rd.run(rctx, &readers) })
	defer func() {
		stopReading()
		readers.Wait()
		r.saw(s.confirmed)
		if s.confirmed > rd.reported {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			if err := st.Report(sctx, s.confirmed); err != nil {
				r.log.WarnContext(ctx, "walrelay: final status not sent", "error", err, "lsn", s.confirmed)
			}
		}
	}()
	return s.follow(ctx, rd)
}

// follow is the session's side of a stream: it retries the held events when
// due, takes what the reader read, up to a call's worth of events, and
// publishes it (flush), until ctx is cancelled or something fails.
func (s *session) follow(ctx context.Context, rd *reader) error {
	cfg := &s.r.cfg
	in := &inbox{ch: rd.out}
	wake := time.NewTimer(time.Hour) // the next retry of a held event
	defer wake.Stop()
	for {
		for s.retryDue() {
			if err := s.retry(ctx); err != nil {
				return ended(ctx, err)
			}
		}
		if len(s.held) >= cfg.MaxHeld { // read no further until some are settled
			if !sleep(ctx, time.Until(s.retryAt)) {
				return nil
			}
			continue
		}
		if !in.ready() {
			var retry <-chan time.Time // nil: nothing held, nothing to retry
			if len(s.held) > 0 {
				wake.Reset(time.Until(s.retryAt))
				retry = wake.C
			}
			select {
			case c, ok := <-rd.out:
				if !ok { // the reader stopped: what it read is handled
					return ended(ctx, rd.err)
				}
				in.set(c)
			case <-retry:
				continue
			case <-ctx.Done():
				return nil
			}
			wake.Stop()
		}
		// What the reader has read already goes with it, up to a call's
		// worth of events.
		for in.ready() {
			if err := s.take(ctx, in.next()); err != nil {
				return ended(ctx, err)
			}
			if len(s.pending) >= cfg.BatchSize || len(s.held) >= cfg.MaxHeld {
				break
			}
		}
		if err := s.flush(ctx); err != nil {
			return ended(ctx, err)
		}
	}
}

// ended is what stream returns for err: nil once ctx is cancelled.
func ended(ctx context.Context, err error) error {
	select {
	case <-ctx.Done():
		return nil // the error is the cancellation's
	default:
		return err
	}
}

// sleep waits d, or until ctx is done (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// The table relay of Config.Parked, which the relay runs itself while it
// streams the slot: it retries and dead-letters the events parked in
// Config.Table, with the relay as its Confirmer.

// A table relay takes a WAL relay as its Config.Confirmer.
var _ relay.Confirmer = (*Relay)(nil)

// parkedConns bounds the parked relay's pool (Config.Parked).
const parkedConns = 4

// runParked runs the table relay of Config.Parked over Config.Table, with
// this relay as its Confirmer, until ctx is done (the stream ended),
// starting it again after Config.RetryInterval should it stop on an error.
func (r *Relay) runParked(ctx context.Context) {
	cfg := *r.cfg.Parked
	cfg.Confirmer = r
	for {
		err := r.parkedOnce(ctx, cfg)
		if ctx.Err() != nil {
			return
		}
		r.log.ErrorContext(ctx, "walrelay: the relay of the parked events stopped; starting it again",
			"error", err, "table", r.table.String(), "retry_in", r.cfg.RetryInterval)
		if !sleep(ctx, r.cfg.RetryInterval) {
			return
		}
	}
}

// parkedOnce opens the parked relay's pool and runs it until ctx is done or
// it fails.
func (r *Relay) parkedOnce(ctx context.Context, cfg relay.Config) error {
	sqlDB, err := openDB(r.dsn)
	if err != nil {
		return fmt.Errorf("walrelay: open: %w", err)
	}
	defer func() { _ = sqlDB.Close() }()
	sqlDB.SetMaxOpenConns(parkedConns)
	db, err := gorm.Open(dialector(sqlDB), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fmt.Errorf("walrelay: open: %w", err)
	}
	tr, err := relay.New(db, r.pub, cfg)
	if err != nil {
		return fmt.Errorf("walrelay: parked relay: %w", err)
	}
	return tr.Run(ctx)
}
