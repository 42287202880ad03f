package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/store"
)

// listen holds one connection in LISTEN on the wake-up channel and wakes the
// relay on each notification, reconnecting with backoff when it drops (only on
// a database that can: store.Listen). The connection is opened outside
// the pool of the relay's handle (with its connections' settings): it is
// never given back, and would starve a small pool.
func (r *Relay) listen(ctx context.Context) {
	listenLoop(ctx, r.log, "listen for wake-ups", r.drv.Waker(), r.db, string(r.channel), func(string) { r.Wake() })
}

// listenLoop holds w's LISTEN on channel of db's database until ctx is done,
// connecting again (retry) when it drops, and calls wake with each
// notification's payload ("" at each start).
func listenLoop(ctx context.Context, log *slog.Logger, what string, w store.Waker, db *sql.DB, channel string, wake func(string)) {
	for ctx.Err() == nil {
		retry(ctx, log, what, func(ctx context.Context) error {
			err := w.Listen(ctx, db, channel, wake)
			if ctx.Err() != nil {
				return nil //nolint:nilerr // cancelled: the listen's error is the cancellation; stop retrying
			}
			return err
		})
	}
}

// Notifier wakes relays in other processes: after events commit, Notify asks
// it to send one NOTIFY on the relay's channel; a function Tenant returns asks
// for one that names a tenant, which wakes that tenant of a fleet listening on
// the channel (fleet.Config.Listen). Notifications are debounced: at most one
// statement per MinInterval (the tenants named meanwhile together), sent on a
// connection of the pool, given back at once, outside the writers'
// transactions (a NOTIFY inside a transaction takes a database-wide lock at
// its commit; one per commit would serialize the writers). Only the relay's
// LISTEN keeps a connection, its own, outside the pool.
type Notifier struct {
	db      *sql.DB
	waker   store.Waker
	channel string
	every   time.Duration
	pending chan struct{}
	log     *slog.Logger

	mu      sync.Mutex
	plain   bool                // Notify was called
	tenants map[string]struct{} // the tenants named (Tenant)
}

// NotifierConfig configures a Notifier.
type NotifierConfig struct {
	// Channel is the LISTEN/NOTIFY channel. Defaults to "herald_outbox"
	// (DefaultChannel).
	Channel string
	// MinInterval is the least time between two notifications. Defaults to 1ms.
	MinInterval time.Duration
	// Logger receives the notifier's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// ErrNoNotify is returned by NewNotifier for a database that cannot notify
// other processes (SQLite, MySQL): there, relays in other processes find
// events by polling (Config.PollInterval), and a relay in the writer's process
// is woken by its Wake.
var ErrNoNotify = errors.New("relay: this database has no LISTEN/NOTIFY")

// NewNotifier returns a notifier that sends through db. Run it, and set
// outboxhook.Config.Notify to its Notify method. It fails with ErrNoNotify on a
// database without LISTEN/NOTIFY.
func NewNotifier(db *gorm.DB, cfg NotifierConfig) (*Notifier, error) {
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	channel, sqlDB, w, err := notifyConn(db, cfg.Channel, "notifier")
	if err != nil {
		return nil, err
	}
	return &Notifier{db: sqlDB, waker: w, channel: channel, every: cfg.MinInterval,
		pending: make(chan struct{}, 1), log: cfg.Logger.With("component", "herald.notifier"), tenants: map[string]struct{}{}}, nil
}

// Notify asks for a notification; it never blocks. Requests made while one is
// pending or within MinInterval of the last are merged.
func (n *Notifier) Notify() {
	n.mu.Lock()
	n.plain = true
	n.mu.Unlock()
	n.signal()
}

// Tenant returns a function that asks for a notification naming tenant id
// (its payload), for outboxhook.Config.Notify on the tenant's handle: a fleet
// listening on the channel (fleet.Config.Listen) wakes that tenant, a plain
// relay wakes as on Notify. It never blocks; the tenants named within
// MinInterval go in one statement. The notifier's database need not be the
// tenant's: NOTIFY reaches the sessions of its own database, so writers of
// many tenant databases on one server may notify through a handle on one
// database the fleet listens on.
func (n *Notifier) Tenant(id string) func() {
	return func() {
		n.mu.Lock()
		n.tenants[id] = struct{}{}
		n.mu.Unlock()
		n.signal()
	}
}

func (n *Notifier) signal() {
	select {
	case n.pending <- struct{}{}:
	default:
	}
}

// take returns what was asked since the last call, and forgets it.
func (n *Notifier) take() (plain bool, tenants []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id := range n.tenants {
		tenants = append(tenants, id)
	}
	clear(n.tenants)
	plain, n.plain = n.plain, false
	return plain, tenants
}

// Run sends the notifications until ctx is cancelled, then returns nil. A failed
// NOTIFY is logged and dropped: the relays' polling covers it.
func (n *Notifier) Run(ctx context.Context) error {
	lim := newLimiter(30 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.pending:
		}
		plain, tenants := n.take()
		var err error
		if plain {
			err = n.waker.Notify(ctx, n.db, n.channel)
		}
		if len(tenants) > 0 {
			err = errors.Join(err, n.waker.Notify(ctx, n.db, n.channel, tenants...))
		}
		if err != nil && ctx.Err() == nil && lim.allow() {
			n.log.Warn("notify failed", "err", err, "suppressed", lim.suppressed())
		}
		if !outbound.Sleep(ctx, n.every) {
			return nil
		}
	}
}

// TenantListener wakes the tenants of a fleet that notifications name
// (Notifier.Tenant): it holds a connection of its own to its database in
// LISTEN on the channel. A fleet runs one per handle of fleet.Config.Listen.
type TenantListener struct {
	db      *sql.DB
	waker   store.Waker
	channel string
	log     *slog.Logger
}

// NewTenantListener returns a listener on channel (DefaultChannel when empty)
// of db's database. It fails with ErrNoNotify on a database without
// LISTEN/NOTIFY; it opens no connection: Run does.
func NewTenantListener(db *gorm.DB, channel string, log *slog.Logger) (*TenantListener, error) {
	if log == nil {
		log = slog.Default()
	}
	channel, sqlDB, w, err := notifyConn(db, channel, "listener")
	if err != nil {
		return nil, err
	}
	return &TenantListener{db: sqlDB, waker: w, channel: channel, log: log}, nil
}

// notifyConn checks channel (DefaultChannel when empty) and that db's
// database has LISTEN/NOTIFY (ErrNoNotify), for a notifier or a listener
// (what), and returns the channel, db's pool and its waker.
func notifyConn(db *gorm.DB, channel, what string) (string, *sql.DB, store.Waker, error) {
	if channel == "" {
		channel = DefaultChannel
	}
	if _, err := ident.ParseName(channel); err != nil {
		return "", nil, nil, fmt.Errorf("relay: %s channel: %w", what, err)
	}
	conn, err := drivers.Open(db, "")
	if err != nil {
		return "", nil, nil, fmt.Errorf("relay: %w", err)
	}
	if !conn.Driver.Caps().Has(store.Listen) {
		return "", nil, nil, fmt.Errorf("%w (%s)", ErrNoNotify, conn.Driver.Name())
	}
	return channel, conn.DB, conn.Driver.Waker(), nil
}

// Run listens until ctx is done, then returns nil, calling wake with the
// tenant each notification names (never with none: a plain notification, and
// the start of each listen, wake no one). When the connection drops, it
// connects again, backing off, logging at a limited rate; notifications sent
// meanwhile are lost, which the fleet's probes make up for.
func (l *TenantListener) Run(ctx context.Context, wake func(tenant string)) error {
	listenLoop(ctx, l.log, "listen for tenants' wake-ups", l.waker, l.db, l.channel, func(p string) {
		if p != "" {
			wake(p)
		}
	})
	return nil
}
