package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/relay"
)

// Tenant is one outbox the fleet relays: a database of its own, opened on
// demand (Open), or a table on a database it shares with others (DB, the
// table schema-qualified).
type Tenant struct {
	// ID names the tenant: unique in the fleet, carried by each message
	// published for it (events.MetaTenant) and by its relay's logs.
	// Required.
	ID string
	// DB reads the tenant's outbox through a pool the application keeps
	// open, shared with other tenants (a schema each on one database): the
	// fleet never closes it. While it runs, it keeps one connection of the
	// pool for the probes of its tenants, so that they run on one server
	// process (another every 10 minutes), and gives it back when Run
	// returns. Set DB or Open, not both.
	DB *gorm.DB
	// Open opens the tenant's own database when the fleet needs it. The
	// fleet caps the pool at Config.ConnsPerTenant connections, keeps none
	// open while the tenant is idle, and closes the pool once the tenant
	// has been idle for Config.IdleClose.
	Open func(ctx context.Context) (*gorm.DB, error)
	// Table is the tenant's outbox table, optionally schema-qualified
	// ("tenant_42.outbox_messages"). Defaults to Config.Relay.Table.
	Table string
}

// Config configures a Fleet. Tenants is required; every other field ends
// with its default.
type Config struct {
	// Tenants returns the tenants to relay. The fleet calls it at Run and
	// again every RefreshInterval: tenants it no longer returns are stopped
	// and forgotten, new ones start, without a restart. An error keeps the
	// last list (and is logged). Required.
	Tenants func(ctx context.Context) ([]Tenant, error)
	// RefreshInterval is how often Tenants is called again. Defaults to 30s.
	RefreshInterval time.Duration

	// Relay is every tenant's relay configuration: its mode, retries,
	// retention, batch size. The fleet sets, per tenant, Table (Tenant.Table
	// when set) and Tenant (the tenant's ID), and turns LISTEN off (the
	// fleet wakes its tenants: Wake, and its probes). InstanceID names this
	// fleet process in every tenant's database (and among the members).
	// Relay.Workers must be below ConnsPerTenant. Defaults to relay.Config's
	// defaults.
	Relay relay.Config

	// MaxConns is the fleet's budget of database connections: a tenant
	// being relayed takes ConnsPerTenant of it, a probe one, and nothing
	// else opens a connection. Defaults to 48.
	MaxConns int
	// ConnsPerTenant is the connections one tenant being relayed may hold
	// (its pool's limit when the fleet opened it): its batches and its
	// leases' renewals. Defaults to 3.
	ConnsPerTenant int
	// Probes is how many idle tenants are probed at once, each probe one
	// statement ("is anything pending, and when is it due?"). Defaults to 4.
	Probes int
	// MinProbe is how soon a tenant that just had work is probed again; an
	// idle tenant's probes then grow apart, doubling up to MaxProbe.
	// Defaults to Relay.PollInterval, or MaxProbe when that is shorter.
	MinProbe time.Duration
	// MaxProbe is the longest an idle tenant goes unprobed: how late, at
	// most, a new event of a tenant nobody woke (Wake) is seen. Defaults
	// to 10s.
	MaxProbe time.Duration
	// Slice is how long a tenant with work keeps its place while others wait
	// for one: then it finishes its batch and queues behind them, so that a
	// tenant burning a backlog cannot delay another's events by more than
	// about one Slice per tenant ahead of them. Defaults to 2s.
	Slice time.Duration
	// IdleClose is how long a tenant opened through Tenant.Open stays idle
	// before the fleet closes its pool. Defaults to 1m.
	IdleClose time.Duration
	// MaxBackoff caps the wait before a failing tenant (its database down,
	// its table gone, its grants revoked) is tried again; the waits double
	// from MinProbe. Defaults to 1m.
	MaxBackoff time.Duration

	// Members, when set, is the control database several fleet processes
	// share the tenants through: each beats in its herald_fleet_relays table
	// (created when missing) and serves the tenants that hash to it among
	// the live members (rendezvous hashing), so that a member that joins,
	// leaves or dies moves only its share. Two members serving one tenant
	// for a moment (while they learn of a change) is safe: a tenant's relays
	// claim with row locks and, ordered, partition leases. Defaults to nil:
	// this process serves every tenant.
	Members *gorm.DB
	// MemberTTL is how long a member that stopped beating still counts as
	// live; members beat every third of it. Defaults to 15s.
	MemberTTL time.Duration

	// Listen are handles on PostgreSQL databases where the writers notify
	// their tenants' commits (a relay.Notifier's Tenant as their
	// outboxhook.Config.Notify): the fleet holds a connection of its own in
	// LISTEN on Channel in each (outside MaxConns; connected again when it
	// drops) and wakes the tenant each notification names, as Wake does, so
	// that an idle tenant's new event is relayed at once, not at its next
	// probe. A notification reaches the sessions of its own database: one
	// handle serves every tenant whose writers notify through a handle on
	// that database (the members' control database, say), so one connection
	// per server, not per tenant database. New fails on a database without
	// LISTEN/NOTIFY (relay.ErrNoNotify). Defaults to none: the probes find
	// the new events.
	Listen []*gorm.DB
	// Channel is Listen's LISTEN/NOTIFY channel: the writers' notifiers'.
	// Defaults to relay.DefaultChannel.
	Channel string

	// TenantMetrics is how many tenants label their relays' metrics with
	// their tenant (relay.Config.TenantMetrics), the first listed first; the
	// others' counters add up unlabelled and they observe no outbox gauges,
	// so that the series stay bounded. A labelled tenant's outbox gauges are
	// observed from its first run, between runs too, until the fleet lets its
	// pool go (a Tenant.Open tenant's IdleClose after its last work): each
	// collection reads them from its database. The fleet's own gauges
	// (herald.fleet.tenants by state, herald.fleet.connections) are always
	// observed, through Relay.MeterProvider. Defaults to 0: no tenant
	// labelled.
	TenantMetrics int

	// Logger receives the fleet's logs, and each tenant's relay's (with the
	// attribute "tenant") unless Relay.Logger is set. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

const (
	defaultRefresh   = 30 * time.Second
	defaultMaxConns  = 48
	defaultPerTenant = 3
	defaultProbes    = 4
	defaultMaxProbe  = 10 * time.Second
	defaultSlice     = 2 * time.Second
	defaultIdleClose = time.Minute
	defaultBackoff   = time.Minute
	defaultMemberTTL = 15 * time.Second
)

func (c *Config) setDefaults() {
	setDefault(&c.RefreshInterval, defaultRefresh)
	setDefault(&c.MaxConns, defaultMaxConns)
	setDefault(&c.ConnsPerTenant, defaultPerTenant)
	setDefault(&c.Probes, defaultProbes)
	setDefault(&c.MaxProbe, defaultMaxProbe)
	setDefault(&c.Slice, defaultSlice)
	setDefault(&c.IdleClose, defaultIdleClose)
	setDefault(&c.MaxBackoff, defaultBackoff)
	setDefault(&c.MemberTTL, defaultMemberTTL)
	setDefault(&c.Channel, relay.DefaultChannel)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	// The relay's own defaults, so that the fleet sees them (PollInterval,
	// Workers, InstanceID: one name for every tenant's relay).
	if c.Relay.Logger == nil {
		c.Relay.Logger = c.Logger
	}
	c.Relay.DisableListen = true
	c.Relay = c.Relay.WithDefaults()
	setDefault(&c.MinProbe, min(c.Relay.PollInterval, c.MaxProbe))
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
	return c.validate()
}

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Tenants != nil, "Tenants is required")
	check(c.RefreshInterval > 0, "RefreshInterval must be positive")
	check(c.ConnsPerTenant >= 2, "ConnsPerTenant must be at least 2 (a batch and its leases), got %d", c.ConnsPerTenant)
	check(c.MaxConns >= c.ConnsPerTenant+1, "MaxConns (%d) must be above ConnsPerTenant (%d): a tenant and a probe", c.MaxConns, c.ConnsPerTenant)
	check(c.Relay.Workers < c.ConnsPerTenant, "Relay.Workers (%d) must be below ConnsPerTenant (%d): the leases need a connection beside the batches",
		c.Relay.Workers, c.ConnsPerTenant)
	check(c.Probes > 0 && c.Probes < c.MaxConns, "Probes must be between 1 and MaxConns-1, got %d", c.Probes)
	check(c.MinProbe > 0 && c.MinProbe <= c.MaxProbe, "MinProbe (%v) must be positive and at most MaxProbe (%v)", c.MinProbe, c.MaxProbe)
	check(c.Slice > 0, "Slice must be positive")
	check(c.IdleClose > 0, "IdleClose must be positive")
	check(c.MaxBackoff >= c.MinProbe, "MaxBackoff must be at least MinProbe")
	check(c.MemberTTL >= 3*time.Millisecond, "MemberTTL must be at least 3ms")
	check(c.TenantMetrics >= 0, "TenantMetrics must not be negative")
	if err := c.Relay.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}
