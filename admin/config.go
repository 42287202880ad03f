package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/heraldgo/herald/internal/ident"
)

// Config configures the admin page and the operations. The zero value is
// ready to use: a read-only page on outbox_messages.
type Config struct {
	// Table is the outbox table, optionally schema-qualified; it must match
	// the outbox hook's and the relay's. Defaults to "outbox_messages".
	Table string
	// AllowWrites turns the requeue buttons and the POST routes on. Defaults
	// to false: the page is read-only and a POST is refused with 403.
	AllowWrites bool
	// TrustedOrigins are origins ("https://console.example.com") besides the
	// page's own that may POST to it, for cross-site request forgery
	// protection (see the package doc). Defaults to none.
	TrustedOrigins []string
	// DeadLimit is how many dead events the page and its JSON list, oldest
	// death first. Defaults to 100.
	DeadLimit int
	// MaxAge is the age of the oldest pending event past which the outbox is
	// unhealthy (Status.Problems), as dead events make it. Defaults to 5m;
	// negative: the age never is a problem.
	MaxAge time.Duration
	// Wake is called after a requeue, so that a relay of this process
	// publishes the requeued events at once: the relay's Wake. Defaults to
	// nil: relays find them at their next poll, or on PostgreSQL when
	// woken through Channel.
	Wake func()
	// Channel is the LISTEN/NOTIFY channel a requeue notifies on PostgreSQL,
	// waking the relays of every process at once; it must match the relays'
	// (relay.Config.Channel). Defaults to "herald_outbox".
	Channel string
	// Title heads the page. Defaults to "Herald outbox".
	Title string
	// Logger logs what fails (a query, a refused cross-origin request).
	// Defaults to slog.Default().
	Logger *slog.Logger
}

const (
	defaultTable     = "outbox_messages"
	defaultDeadLimit = 100
	defaultMaxAge    = 5 * time.Minute
	defaultChannel   = "herald_outbox"
	defaultTitle     = "Herald outbox"
)

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = defaultTable
	}
	if c.DeadLimit == 0 {
		c.DeadLimit = defaultDeadLimit
	}
	if c.MaxAge == 0 {
		c.MaxAge = defaultMaxAge
	}
	if c.Channel == "" {
		c.Channel = defaultChannel
	}
	if c.Title == "" {
		c.Title = defaultTitle
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports what is wrong with c after defaults are applied.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if _, err := ident.ParseTable(c.Table); err != nil {
		errs = append(errs, fmt.Errorf("invalid Table: %w", err))
	}
	if _, err := ident.ParseName(c.Channel); err != nil {
		errs = append(errs, fmt.Errorf("invalid Channel: %w", err))
	}
	if c.DeadLimit < 0 {
		errs = append(errs, fmt.Errorf("DeadLimit is %d, must not be negative", c.DeadLimit))
	}
	cop := http.NewCrossOriginProtection()
	for _, o := range c.TrustedOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("invalid TrustedOrigins: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("admin: invalid config: %w", err)
	}
	return nil
}
