package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/walrelay"
)

// Config configures the admin page and the operations. The zero value is
// ready to use: a read-only page on outbox_messages.
type Config struct {
	// Table is the outbox table, optionally schema-qualified; it must match
	// the outbox hook's and the relay's. Defaults to "outbox_messages"
	// (outboxhook.DefaultTable).
	Table string
	// AllowWrites turns the requeue buttons and the POST routes on; without
	// it the page is read-only and a POST is refused with 403.
	// Defaults to false.
	AllowWrites bool
	// TrustedOrigins are origins ("https://console.example.com") besides the
	// page's own that may POST to it, for cross-site request forgery
	// protection (see the package doc). Defaults to none.
	TrustedOrigins []string
	// DeadLimit is how many dead events the page and its JSON list, oldest
	// death first. Defaults to 100.
	DeadLimit int
	// FailingLimit is how many groups of failing events (pending events
	// whose publish failed, by type and last error) the page and its JSON
	// list, the largest group first. Defaults to 100.
	FailingLimit int
	// ScheduledLimit is how many scheduled events (neither published nor
	// dead) the page and its JSON list, soonest due first. Defaults to 100.
	ScheduledLimit int
	// DeadGroupLimit is how many groups of dead events (by type and
	// normalised error, Outbox.DeadGroups) the page and its JSON list, the
	// largest group first. Defaults to 50.
	DeadGroupLimit int
	// DeadGroupScan is the most dead events Outbox.DeadGroups reads to group
	// them (oldest death first, through the dead index); past it the groups
	// cover the first DeadGroupScan dead events and say so
	// (DeadGroups.Truncated). Acting on a group is not bounded by it.
	// Defaults to 100,000.
	DeadGroupScan int
	// MaxAge is the age of the oldest pending event past which the outbox is
	// unhealthy (Status.Problems), as dead events make it; negative, the age
	// never is a problem. The page also shows in red a scheduled event due
	// longer than it and not published. Defaults to 5m.
	MaxAge time.Duration
	// WALSlot is the replication slot of a WAL relay (walrelay.Config.Slot)
	// that Status, the page and api/status report, on PostgreSQL: its lag,
	// the WAL it holds back, whether a relay streams it. A missing or
	// invalidated slot, or one lagging past MaxWALLag, makes the outbox
	// unhealthy. With it the outbox table may be missing (StorageWAL keeps
	// none). Defaults to none: no slot is reported.
	WALSlot string
	// MaxWALLag is the lag of WALSlot (walrelay.SlotStatus.LagBytes) past
	// which the outbox is unhealthy; negative, the lag never is a problem.
	// Defaults to 1 GiB (DefaultMaxWALLag).
	MaxWALLag int64
	// RelayTimeout is how long after its last heartbeat a relay still
	// counts as alive (Relays): unordered relays beat every 10 seconds,
	// ordered ones every third of their LeaseDuration, so it must exceed
	// that. Due events waiting longer than it while no relay is alive make
	// the outbox unhealthy. Defaults to 1m (DefaultRelayTimeout).
	RelayTimeout time.Duration
	// Wake is called after a requeue, and after a scheduled event is made
	// due (Outbox.PublishNow), so that a relay of this process publishes the
	// events at once: the relay's Wake. Without it, relays find them at
	// their next poll, or on PostgreSQL when woken through Channel. Defaults
	// to none.
	Wake func()
	// Channel is the LISTEN/NOTIFY channel a requeue (or a publish now)
	// notifies on PostgreSQL, waking the relays of every process at once; it
	// must match the relays' (relay.Config.Channel). Defaults to
	// "herald_outbox" (relay.DefaultChannel).
	Channel string
	// Actor names who sent a request to the page, for the audit trail of
	// its group actions (GroupAction.By): the service's authenticated
	// operator, say. Defaults to "page " and the request's RemoteAddr.
	Actor func(*http.Request) string
	// Fleet is a relay fleet (a *fleet.Fleet) whose tenants the page shows:
	// their count by state on the page and in api/status, from the fleet's
	// memory, and a page of their own (tenants, and api/tenants) listing
	// each tenant's state, serving member, error and outbox figures, the
	// worst first. Open ignores it. Defaults to nil: no tenants are shown
	// (the tenants routes answer 404).
	Fleet Fleet
	// TenantLimit is how many tenants the tenants page and its JSON list,
	// the worst first. Defaults to 100.
	TenantLimit int
	// TenantTimeout bounds the reading of the tenants' figures for the
	// tenants page (Fleet.Stats: a statement per tenant this process serves,
	// fleet.Config.Probes at a time, on the fleet's connections): past it
	// the page lists the tenants' states without figures, and says so.
	// Defaults to 15s (DefaultTenantTimeout).
	TenantTimeout time.Duration
	// Title heads the page. Defaults to "Herald outbox".
	Title string
	// Logger logs what fails (a query, a refused cross-origin request).
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// DefaultMaxWALLag is the default Config.MaxWALLag: 1 GiB.
const DefaultMaxWALLag int64 = 1 << 30

const (
	defaultTable      = store.DefaultOutbox
	defaultDeadLimit  = 100
	defaultFailLimit  = 100
	defaultSchedLimit = 100
	defaultGroupScan  = 100_000
	defaultGroupLimit = 50
	defaultTenLimit   = 100
	defaultMaxAge     = 5 * time.Minute
	defaultChannel    = store.DefaultChannel
	defaultTitle      = "Herald outbox"
)

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = defaultTable
	}
	if c.DeadLimit == 0 {
		c.DeadLimit = defaultDeadLimit
	}
	if c.FailingLimit == 0 {
		c.FailingLimit = defaultFailLimit
	}
	if c.DeadGroupLimit == 0 {
		c.DeadGroupLimit = defaultGroupLimit
	}
	if c.DeadGroupScan == 0 {
		c.DeadGroupScan = defaultGroupScan
	}
	if c.ScheduledLimit == 0 {
		c.ScheduledLimit = defaultSchedLimit
	}
	if c.MaxAge == 0 {
		c.MaxAge = defaultMaxAge
	}
	if c.MaxWALLag == 0 {
		c.MaxWALLag = DefaultMaxWALLag
	}
	if c.RelayTimeout == 0 {
		c.RelayTimeout = DefaultRelayTimeout
	}
	if c.TenantLimit == 0 {
		c.TenantLimit = defaultTenLimit
	}
	if c.TenantTimeout == 0 {
		c.TenantTimeout = DefaultTenantTimeout
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
	_, err := c.parse()
	return err
}

// parse applies c's defaults, checks c (Validate) and returns its Table
// parsed: Open and New call it once (newOutbox) and keep what it made;
// Validate calls it on a copy.
func (c *Config) parse() (ident.Table, error) {
	c.setDefaults()
	var errs []error
	table, err := ident.ParseTable(c.Table)
	if err != nil {
		errs = append(errs, fmt.Errorf("invalid Table: %w", err))
	}
	if _, err := ident.ParseName(c.Channel); err != nil {
		errs = append(errs, fmt.Errorf("invalid Channel: %w", err))
	}
	if c.WALSlot != "" {
		if err := (walrelay.Config{Slot: c.WALSlot}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("invalid WALSlot %q: lowercase letters, digits and underscores, at most 63", c.WALSlot))
		}
	}
	if c.DeadLimit < 0 {
		errs = append(errs, fmt.Errorf("DeadLimit is %d, must not be negative", c.DeadLimit))
	}
	if c.RelayTimeout < 0 {
		errs = append(errs, fmt.Errorf("RelayTimeout is %s, must not be negative", c.RelayTimeout))
	}
	if c.FailingLimit < 0 {
		errs = append(errs, fmt.Errorf("FailingLimit is %d, must not be negative", c.FailingLimit))
	}
	if c.DeadGroupLimit < 0 {
		errs = append(errs, fmt.Errorf("DeadGroupLimit is %d, must not be negative", c.DeadGroupLimit))
	}
	if c.DeadGroupScan < 0 {
		errs = append(errs, fmt.Errorf("DeadGroupScan is %d, must not be negative", c.DeadGroupScan))
	}
	if c.ScheduledLimit < 0 {
		errs = append(errs, fmt.Errorf("ScheduledLimit is %d, must not be negative", c.ScheduledLimit))
	}
	if c.TenantLimit < 0 {
		errs = append(errs, fmt.Errorf("TenantLimit is %d, must not be negative", c.TenantLimit))
	}
	if c.TenantTimeout < 0 {
		errs = append(errs, fmt.Errorf("TenantTimeout is %s, must not be negative", c.TenantTimeout))
	}
	cop := http.NewCrossOriginProtection()
	for _, o := range c.TrustedOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("invalid TrustedOrigins: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ident.Table{}, fmt.Errorf("admin: invalid config: %w", err)
	}
	return table, nil
}
