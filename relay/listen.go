package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
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
	w := r.drv.Waker()
	for ctx.Err() == nil {
		retry(ctx, r.log, "listen for wake-ups", func(ctx context.Context) error {
			err := w.Listen(ctx, r.db, string(r.channel), r.Wake)
			if ctx.Err() != nil {
				return nil //nolint:nilerr // cancelled: the listen's error is the cancellation; stop retrying
			}
			return err
		})
	}
}

// Notifier wakes relays in other processes: after events commit, Notify asks
// it to send one NOTIFY on the relay's channel. Notifications are debounced: at
// most one per MinInterval, each sent as one statement on a connection of the
// pool, given back at once, outside the writers' transactions (a NOTIFY inside
// a transaction takes a database-wide lock at its commit; one per commit would
// serialize the writers). Only the relay's LISTEN keeps a connection, its own,
// outside the pool.
type Notifier struct {
	db      *sql.DB
	waker   store.Waker
	channel string
	every   time.Duration
	pending chan struct{}
	log     *slog.Logger
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
	if cfg.Channel == "" {
		cfg.Channel = DefaultChannel
	}
	if _, err := ident.ParseName(cfg.Channel); err != nil {
		return nil, fmt.Errorf("relay: notifier channel: %w", err)
	}
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	conn, err := drivers.Open(db, "")
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if !conn.Driver.Caps().Has(store.Listen) {
		return nil, fmt.Errorf("%w (%s)", ErrNoNotify, conn.Driver.Name())
	}
	return &Notifier{db: conn.DB, waker: conn.Driver.Waker(), channel: cfg.Channel, every: cfg.MinInterval,
		pending: make(chan struct{}, 1), log: cfg.Logger.With("component", "herald.notifier")}, nil
}

// Notify asks for a notification; it never blocks. Requests made while one is
// pending or within MinInterval of the last are merged.
func (n *Notifier) Notify() {
	select {
	case n.pending <- struct{}{}:
	default:
	}
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
		if err := n.waker.Notify(ctx, n.db, n.channel); err != nil && ctx.Err() == nil && lim.allow() {
			n.log.Warn("notify failed", "err", err, "suppressed", lim.suppressed())
		}
		if !outbound.Sleep(ctx, n.every) {
			return nil
		}
	}
}
