package walrelay

import (
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

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/telemetry"
	"github.com/heraldgo/herald/publish"
)

// The Relay, what New makes of its Config and the database it is bound to.
// Run (run.go) sets it up (setup.go, the slot in lost.go) and streams the
// slot: the stream read and decoded ahead (stream.go), the session that
// follows it (session.go), publishes (publish.go) and parks what the
// broker refuses (park.go).

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
