package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/relay"
)

// The roles of the child processes: the first argument of a child.
const (
	roleFleet    = "fleet"
	roleConsumer = "consumer"
)

// options are the run's flags.
type options struct {
	tenants, sqliteTenants int
	mysqlTenants           int
	dur, killEvery         time.Duration
	outages                int
	outageLen              time.Duration
	revoke                 bool
	revokeFor              time.Duration
	writeRate, writers     int
	hot                    int
	hotShare               float64
	fleets, consumers      int
	drain                  time.Duration
	nats                   string
	fleet                  fleetSettings
	log                    bool
}

// fleetSettings are the fleet processes' settings: their relays' (short,
// so that takeovers and retries happen within the run) and their fleet's.
type fleetSettings struct {
	PublishTimeout, Lease      time.Duration
	MinBackoff, MaxBackoff     time.Duration
	Poll                       time.Duration // the relays' PollInterval: the fleet's MinProbe
	MaxProbe, TenantMaxBackoff time.Duration
	MemberTTL                  time.Duration
	MaxConns                   int
}

// relay is the fleet's relay configuration (ordered), without its instance.
func (s fleetSettings) relay() relay.Config {
	return relay.Config{Ordered: true, PublishTimeout: s.PublishTimeout, LeaseDuration: s.Lease,
		MinBackoff: s.MinBackoff, MaxBackoff: s.MaxBackoff, PollInterval: s.Poll}
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("fleetchaos", flag.ExitOnError)
	fs.IntVar(&o.tenants, "tenants", 200, "PostgreSQL tenants: a schema each (tenant_000, ...) on the run's own server")
	fs.IntVar(&o.sqliteTenants, "sqlite-tenants", 0, "SQLite tenants besides: a file each, opened by the fleet through Tenant.Open")
	fs.IntVar(&o.mysqlTenants, "mysql-tenants", 0, "MariaDB tenants besides: a database each on the shared server (HERALD_TEST_MYSQL_DSN), opened by the fleet through Tenant.Open and a proxy that each outage cuts")
	fs.DurationVar(&o.dur, "duration", 30*time.Second, "how long the writers write and the faults fly")
	fs.DurationVar(&o.killEvery, "kill-every", 3*time.Second, "SIGKILL a random fleet process this often (and start it again)")
	fs.IntVar(&o.outages, "outages", 1, "how many times the PostgreSQL server is stopped for -outage and started again")
	fs.DurationVar(&o.outageLen, "outage", 4*time.Second, "how long the PostgreSQL server stays down in an outage")
	fs.BoolVar(&o.revoke, "revoke", true, "revoke one hot tenant's grants from the fleet's role for -revoke-for, then give them back")
	fs.DurationVar(&o.revokeFor, "revoke-for", 4*time.Second, "how long the tenant's grants stay revoked")
	fs.IntVar(&o.writeRate, "write-rate", 200, "the writers' transactions a second, all tenants together")
	fs.IntVar(&o.writers, "writers", 8, "writer goroutines (each tenant has an account per writer)")
	fs.IntVar(&o.hot, "hot", 5, "hot tenants: the first ones, which take -hot-share of the writes")
	fs.Float64Var(&o.hotShare, "hot-share", 0.4, "the share of the writes that goes to the hot tenants")
	fs.IntVar(&o.fleets, "fleets", 3, "fleet processes (members sharing the tenants)")
	fs.IntVar(&o.consumers, "consumers", 2, "consumer processes")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "how long the fleet may take to drain after the last write")
	fs.StringVar(&o.nats, "nats", brokertest.NATSURL(), "the NATS server with JetStream (the run makes a stream of its own there, deleted at the end)")
	fs.DurationVar(&o.fleet.PublishTimeout, "publish-timeout", 500*time.Millisecond, "the relays' PublishTimeout")
	fs.DurationVar(&o.fleet.Lease, "lease", 2*time.Second, "the relays' LeaseDuration (at least 3 PublishTimeouts): how long a killed member's partitions stay leased")
	fs.DurationVar(&o.fleet.MinBackoff, "min-backoff", 100*time.Millisecond, "the relays' MinBackoff")
	fs.DurationVar(&o.fleet.MaxBackoff, "max-backoff", time.Second, "the relays' MaxBackoff")
	fs.DurationVar(&o.fleet.Poll, "poll", 100*time.Millisecond, "the relays' PollInterval (the fleet's MinProbe)")
	fs.DurationVar(&o.fleet.MaxProbe, "max-probe", time.Second, "the fleet's MaxProbe: how late a new event of an idle tenant is seen (the writers are in another process: nobody wakes the fleet)")
	fs.DurationVar(&o.fleet.TenantMaxBackoff, "tenant-backoff", 2*time.Second, "the fleet's MaxBackoff: the longest wait before a failing tenant is tried again")
	fs.DurationVar(&o.fleet.MemberTTL, "member-ttl", 2*time.Second, "the fleet's MemberTTL: how long a killed member counts as live")
	fs.IntVar(&o.fleet.MaxConns, "max-conns", 12, "each fleet process's MaxConns (and its shared pool's limit)")
	fs.BoolVar(&o.log, "log", false, "the children's logs (fleet, relays, inbox) on stderr")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.tenants < 1 || o.tenants > 10000:
		return o, errors.New("-tenants: 1 to 10000")
	case o.sqliteTenants < 0 || o.sqliteTenants > 100:
		return o, errors.New("-sqlite-tenants: 0 to 100")
	case o.mysqlTenants < 0 || o.mysqlTenants > 20:
		return o, errors.New("-mysql-tenants: 0 to 20 (each holds connections of the shared server's 151)")
	case o.fleets < 1 || o.consumers < 1 || o.writers < 1:
		return o, errors.New("-fleets, -consumers and -writers: at least 1")
	case o.writeRate < 1:
		return o, errors.New("-write-rate: at least 1")
	case o.hot < 0 || o.hot > o.tenants || o.hotShare < 0 || o.hotShare >= 1:
		return o, errors.New("-hot: at most -tenants; -hot-share: from 0 to below 1")
	case o.outages > 0 && o.outageLen <= 0:
		return o, errors.New("-outage: positive")
	}
	rc := o.fleet.relay()
	if err := rc.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

// childConfig is what the orchestrator hands a child process, as JSON in
// the environment (envConfig).
type childConfig struct {
	Role     string
	Slot     int    // the process's slot: 1..-fleets or 1..-consumers
	Fleets   int    // how many fleet processes the run has
	Instance string // a fleet process's member name (its relays' InstanceID)
	DSN      string // the server's database, as the superuser (the consumers)
	FleetDSN string // the same as the fleet's role
	MySQL    string // the MariaDB server (a go-sql-driver DSN, no database): writers, consumers
	MySQLVia string // the same through the proxy each outage cuts: the fleet
	NATS     string
	Topic    string
	Tenants  []tenantRef
	Dir      string // the run's directory: status files, SQLite tenants
	Fleet    fleetSettings
	Log      bool
}

// tenantRef names a tenant: a schema of the server, an SQLite file or a
// MariaDB database.
type tenantRef struct {
	ID    string
	File  string // SQLite: the tenant's file
	MySQL string // MariaDB: the tenant's database on the shared server
}

// schema reports whether the tenant is a schema of the PostgreSQL server.
func (t tenantRef) schema() bool { return t.File == "" && t.MySQL == "" }

// open opens the pool of a tenant of its own database (SQLite, MariaDB:
// not a schema), MariaDB's on server.
func (t tenantRef) open(server string) (*gorm.DB, error) {
	if t.MySQL != "" {
		return gorm.Open(mysql.Open(mysqltest.DSN(server, t.MySQL)), quiet())
	}
	return sqliteOpen(t.File)
}

// qualify is table in the tenant: schema-qualified, or as it is (a
// database of its own).
func (t tenantRef) qualify(table string) string {
	if t.schema() {
		return t.ID + "." + table
	}
	return table
}

const envConfig = "FLEETCHAOS_CONFIG"

func (c childConfig) env() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return envConfig + "=" + string(b), nil
}

func readChildConfig() (childConfig, error) {
	var c childConfig
	if err := json.Unmarshal([]byte(os.Getenv(envConfig)), &c); err != nil {
		return c, fmt.Errorf("%s: %w", envConfig, err)
	}
	return c, nil
}

// logger is a child's logger: none, or text on stderr with -log (the MySQL
// driver's own lines too: each connection the outages' proxy cuts).
func (c childConfig) logger() *slog.Logger {
	if c.Log {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("process", c.Instance)
	}
	_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
	return slog.New(slog.DiscardHandler)
}
