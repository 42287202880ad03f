package relay

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/ident"
)

// listen holds one connection in LISTEN on the wake-up channel and wakes the
// relay on each notification, reconnecting with backoff when it drops.
func (r *Relay) listen(ctx context.Context) {
	for ctx.Err() == nil {
		retry(ctx, r.log, "listen for wake-ups", func(ctx context.Context) error {
			err := listenOnce(ctx, r.db, r.cfg.Channel, r.Wake)
			if ctx.Err() != nil {
				return nil
			}
			return err
		})
	}
}

// listenOnce takes a connection from db, LISTENs on channel and calls wake for
// each notification (and once on start, for what was committed meanwhile),
// until ctx is done or the connection fails.
func listenOnce(ctx context.Context, db *sql.DB, channel string, wake func()) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// The session is in LISTEN: never give it back to the pool.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}()
	// Quoted: LISTEN folds an unquoted name to lower case, pg_notify does not.
	if _, err := conn.ExecContext(ctx, `LISTEN `+ident.Name(channel).Quoted()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	wake()
	return conn.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("listen: driver connection is %T, not pgx", dc)
		}
		for {
			if _, err := pc.Conn().WaitForNotification(ctx); err != nil {
				return err
			}
			wake()
		}
	})
}

// Notifier wakes relays in other processes: after events commit, Notify asks
// it to send one NOTIFY on the relay's channel. Notifications are debounced: at
// most one per MinInterval, sent from the notifier's own connection outside the
// writers' transactions (a NOTIFY inside a transaction takes a database-wide
// lock at its commit; one per commit would serialize the writers).
type Notifier struct {
	db      *sql.DB
	channel string
	every   time.Duration
	pending chan struct{}
	log     *slog.Logger
}

// NotifierConfig configures a Notifier.
type NotifierConfig struct {
	// Channel is the LISTEN/NOTIFY channel. Defaults to "herald_outbox".
	Channel string
	// MinInterval is the least time between two notifications. Defaults to 1ms.
	MinInterval time.Duration
	// Logger receives the notifier's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// NewNotifier returns a notifier that sends through db. Run it, and set
// outboxhook.Config.Notify to its Notify method.
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
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	return &Notifier{db: sqlDB, channel: cfg.Channel, every: cfg.MinInterval,
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
		if _, err := n.db.ExecContext(ctx, `SELECT pg_notify($1, '')`, n.channel); err != nil && ctx.Err() == nil && lim.allow() {
			n.log.Warn("notify failed", "err", err, "suppressed", lim.suppressed())
		}
		if !sleep(ctx, n.every) {
			return nil
		}
	}
}
