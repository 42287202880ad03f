package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/fleet"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// The fleet bench: one fleet.Fleet relaying many tenants' outboxes, against
// plain relay.Relay instances, in three parts; and a fourth, scale, of
// several fleet processes sharing the tenants (fleetscale.go).
//
//   - burn: T tenants of E pending events each, burnt down by one fleet,
//     against one relay burning one outbox of T×E events.
//   - idle: many tenants, a few of them active (written to at a steady rate
//     by a process of their own), served by one fleet; then plain relays,
//     one per tenant, idle and active, for the cost of one relay: the
//     statements, the CPU and the connections each costs a second.
//   - fair: one tenant with a large backlog and many cold tenants committing
//     an event a second each: the cold events' commit->publish latency
//     beside the backlog, and without it.
//   - scale: P fleet processes (fleet.Config.Members) sharing T tenants of
//     E pending events each: their burn-down, how the tenants split, and
//     the takeover of a killed member's tenants.
//
// Tenants on PostgreSQL are schemas of a database of the command's own (so
// that pg_stat_database counts the bench alone, and dropping it drops them
// all), read through one shared pool (Tenant.DB, "schema.outbox_messages");
// on MySQL a database each on the server, opened on demand (Tenant.Open) or,
// with -shared, read through one pool ("database.outbox_messages"); on SQLite
// a file each, opened on demand. The tenants are made once per command and
// serve every part and round.

// runFleet is bench fleet: the parts of -parts, one after the other.
func runFleet(fs *flag.FlagSet, args []string) error {
	dbName := fs.String("db", "postgres", "database: postgres, sqlite or mysql")
	partsFlag := fs.String("parts", "burn,idle,fair", "parts to run, comma-separated: burn, idle, fair, scale")
	shared := fs.Bool("shared", false, "MySQL: read the tenants' databases through one shared pool (Tenant.DB, \"db.outbox_messages\") instead of opening each on demand (Tenant.Open); PostgreSQL always shares one pool, SQLite never can")
	tenants := fs.Int("tenants", 0, "burn, scale: tenants (0: 1000 on PostgreSQL, 100 elsewhere)")
	perTenant := fs.Int("events", 0, "burn, scale: pending events per tenant (0: 100 on PostgreSQL, 1000 elsewhere)")
	rounds := fs.Int("rounds", 1, "burn: rounds, the fleet and the single relay in alternating order")
	pubKind := fs.String("publisher", "gochannel", "burn, scale: gochannel or discard (see relay -publishers)")
	idleTenants := fs.Int("idle-tenants", 0, "idle: the fleet's tenants (0: 1000 on PostgreSQL, 100 elsewhere)")
	active := fs.Int("active", 10, "idle: active tenants, a writer each")
	rate := fs.Int("rate", 100, "idle: events a second written to each active tenant")
	relays := fs.Int("relays", 50, "idle: plain relays (one per idle tenant) for an idle relay's cost")
	dur := fs.Duration("duration", 30*time.Second, "idle: the measured window of each run; fair: how long the cold tenants write")
	warmup := fs.Duration("warmup", 20*time.Second, "idle: how long each run runs before its window (an idle tenant's probes grow apart from 1s to 10s: 1+2+4+8 s)")
	hot := fs.Int("hot", 0, "fair: the hot tenant's backlog (0: 1,000,000 on PostgreSQL, 100,000 elsewhere)")
	cold := fs.Int("cold", 50, "fair: cold tenants, each committing one event a second")
	processes := fs.String("processes", "1,2,4", "scale: fleet processes sharing the tenants, a run for each, comma-separated")
	memberTTL := fs.Duration("member-ttl", 3*time.Second, "scale: fleet.Config.MemberTTL (a killed member's tenants move after about it)")
	memberConns := fs.Int("member-conns", 0, "scale: each process's fleet.Config.MaxConns (0: 48, or less so that the largest run fits the server's max_connections less 30)")
	wake := fs.Bool("wake", true, "fair: the cold writers' hook wakes the fleet (outboxhook.Config.Notify = Fleet.Wake); false: the fleet finds their events by its probes")
	conns := fs.Int("conns", 0, "burn, idle, fair: the fleet's MaxConns (0: its default, 48)")
	cpuprofile := fs.String("cpuprofile", "", "burn: write a CPU profile of the fleet's runs (not the set-up, not the single relay's) to this file")
	notify := fs.Bool("notify", false, "fair, PostgreSQL: the cold writers' hook notifies its tenant through the bench's database (relay.Notifier.Tenant), where the fleet listens (fleet.Config.Listen), as writers in another process would; instead of -wake")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bdb, err := pickDB(*dbName)
	if err != nil {
		return err
	}
	switch bdb.name {
	case "postgres":
		*shared = true
	case "sqlite":
		if *shared {
			return errors.New("-shared: SQLite tenants are files, each opened on its own")
		}
	}
	big := func(v *int, pg, other int) {
		if *v <= 0 {
			*v = other
			if bdb.name == "postgres" {
				*v = pg
			}
		}
	}
	big(tenants, 1000, 100)
	big(perTenant, 100, 1000)
	big(idleTenants, 1000, 100)
	big(hot, 1_000_000, 100_000)
	space, err := newFleetSpace(bdb)
	if err != nil {
		return err
	}
	space.conns, space.profile = *conns, *cpuprofile
	defer space.close()
	for _, part := range strings.Split(*partsFlag, ",") {
		var err error
		switch strings.TrimSpace(part) {
		case "burn":
			err = fleetBurn(space, *shared, *tenants, *perTenant, *rounds, *pubKind)
		case "idle":
			err = fleetIdle(space, *shared, *idleTenants, *active, *rate, *relays, *warmup, *dur)
		case "fair":
			w := wakeFleet
			switch {
			case *notify:
				w = wakeNotify
			case !*wake:
				w = wakeNone
			}
			err = fleetFair(space, *shared, *hot, *cold, *dur, w)
		case "scale":
			var procs []int
			if procs, err = intList(*processes); err == nil {
				err = fleetScale(space, *shared, *tenants, *perTenant, procs, *memberTTL, *memberConns, *pubKind)
			}
		default:
			err = fmt.Errorf("unknown part %q: burn, idle, fair or scale", part)
		}
		if err != nil {
			return fmt.Errorf("fleet %s: %w", part, err)
		}
	}
	return nil
}

// fleetSpace is where the tenants of one bench command live, made once and
// used by every part and round: on PostgreSQL a database of the command's
// own, a schema per tenant; on MySQL a database per tenant; on SQLite a file
// per tenant (the bench's scratch file). close drops them all.
type fleetSpace struct {
	bdb     benchDB
	name    string  // PostgreSQL: the space's database
	dsn     string  // PostgreSQL: its DSN
	admin   *sql.DB // PostgreSQL: on it; MySQL: on the server
	drops   []func()
	made    map[string][]tenantOutbox // by name prefix
	conns   int                       // the fleets' MaxConns (-conns; 0: the default)
	profile string                    // burn: the fleet runs' CPU profile (-cpuprofile)
}

// tenantOutbox is one tenant's outbox.
type tenantOutbox struct {
	id string
	// dsn is the tenant's own (PostgreSQL: the server's, its schema on the
	// search_path): its loader's and its writers'.
	dsn string
	// table is its outbox in a pool shared by the tenants ("schema.outbox_messages");
	// empty on SQLite.
	table string
}

func newFleetSpace(bdb benchDB) (*fleetSpace, error) {
	s := &fleetSpace{bdb: bdb}
	var err error
	switch bdb.name {
	case "postgres":
		var admin *sql.DB
		if admin, err = sql.Open("pgx", pgtest.DSN()); err != nil {
			return nil, err
		}
		s.name = pgtest.Name("herald_fleet_")
		if _, err := admin.Exec(`CREATE DATABASE ` + s.name); err != nil {
			_ = admin.Close()
			return nil, fmt.Errorf("create database: %w", err)
		}
		s.drops = append(s.drops, func() {
			_, _ = admin.Exec(`DROP DATABASE IF EXISTS ` + s.name + ` WITH (FORCE)`)
			_ = admin.Close()
		})
		u, perr := url.Parse(pgtest.DSN())
		if perr != nil {
			s.close()
			return nil, perr
		}
		u.Path = "/" + s.name
		s.dsn = u.String()
		s.admin, err = sql.Open("pgx", s.dsn)
	case "mysql":
		// One administrative pool for all the tenants' databases (the
		// bench's scratch keeps a connection per database it made).
		s.admin, err = sql.Open("mysql", testkit.MySQLDSN(testkit.MySQLServer(), ""))
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// add makes tenant id's place: a schema, a database or a file.
func (s *fleetSpace) add(id string) (tenantOutbox, error) {
	switch s.bdb.name {
	case "postgres":
		if _, err := s.admin.Exec(`CREATE SCHEMA ` + id); err != nil {
			return tenantOutbox{}, fmt.Errorf("create schema: %w", err)
		}
		return tenantOutbox{id: id, dsn: pgtest.WithSearchPath(s.dsn, id), table: id + ".outbox_messages"}, nil
	case "mysql":
		name := pgtest.Name("herald_fleet_")
		if _, err := s.admin.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
			return tenantOutbox{}, fmt.Errorf("create database: %w", err)
		}
		s.drops = append(s.drops, func() { _, _ = s.admin.Exec("DROP DATABASE IF EXISTS `" + name + "`") })
		return tenantOutbox{id: id, dsn: testkit.MySQLDSN(testkit.MySQLServer(), name), table: name + ".outbox_messages"}, nil
	}
	dsn, drop, err := s.bdb.scratch()
	if err != nil {
		return tenantOutbox{}, err
	}
	s.drops = append(s.drops, drop)
	return tenantOutbox{id: id, dsn: dsn}, nil
}

// tenants returns the tenants prefix_0000 to prefix_<n-1>, adding those the
// space lacks (each with the unordered relay's tables: setupRelay, the
// outbox's aggregate locks seeded, 65,536 rows on PostgreSQL: the slow part).
func (s *fleetSpace) tenants(prefix string, n int) ([]tenantOutbox, error) {
	if s.made == nil {
		s.made = map[string][]tenantOutbox{}
	}
	have := s.made[prefix]
	if len(have) >= n {
		return have[:n], nil
	}
	t0 := time.Now()
	add := make([]tenantOutbox, n-len(have))
	for i := range add {
		var err error
		if add[i], err = s.add(fmt.Sprintf("%s_%04d", prefix, len(have)+i)); err != nil {
			return nil, err
		}
	}
	if err := s.each(add, func(db *gorm.DB, _ tenantOutbox) error { return setupRelay(db, false) }); err != nil {
		return nil, err
	}
	s.made[prefix] = append(have, add...)
	fmt.Fprintf(os.Stderr, "%d tenants %s_* made in %s\n", len(add), prefix, time.Since(t0).Round(time.Millisecond))
	return s.made[prefix], nil
}

// each runs prep on each of ts through a pool of the tenant's own (its
// dsn), four tenants at a time.
func (s *fleetSpace) each(ts []tenantOutbox, prep func(db *gorm.DB, t tenantOutbox) error) error {
	return fourAtATime(len(ts), func(i int) error {
		dsn := ts[i].dsn
		if s.bdb.name == "postgres" { // the set-up's many small commits unflushed: a loader's only
			dsn += "&synchronous_commit=off"
		}
		db, err := s.bdb.open(dsn)
		if err != nil {
			return err
		}
		defer closeGorm(db)
		return prep(db, ts[i])
	})
}

// fourAtATime calls f for 0..n-1, four calls at a time; a worker whose call
// fails stops, and the errors are returned joined.
func fourAtATime(n int, f func(i int) error) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make([]error, 4)
	)
	for w := range errs {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && errs[w] == nil; i = int(next.Add(1) - 1) {
				errs[w] = f(i)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sharedDSN is the DSN a pool shared by the tenants opens.
func (s *fleetSpace) sharedDSN(ts []tenantOutbox) string {
	if s.bdb.name == "postgres" {
		return s.dsn
	}
	return ts[0].dsn
}

func (s *fleetSpace) close() {
	if s.admin != nil && s.bdb.name == "postgres" {
		_ = s.admin.Close()
	}
	for i := len(s.drops) - 1; i >= 0; i-- {
		s.drops[i]()
	}
	if s.admin != nil && s.bdb.name == "mysql" {
		_ = s.admin.Close()
	}
}

// fleetTenants returns the fleet's tenants of ts: read through pool when it
// is set, else opened on demand through open.
func fleetTenants(ts []tenantOutbox, pool *gorm.DB, open func(dsn string) (*gorm.DB, error)) func(context.Context) ([]fleet.Tenant, error) {
	defs := make([]fleet.Tenant, len(ts))
	for i, t := range ts {
		if pool != nil {
			defs[i] = fleet.Tenant{ID: t.id, DB: pool, Table: t.table}
			continue
		}
		dsn := t.dsn
		defs[i] = fleet.Tenant{ID: t.id, Open: func(context.Context) (*gorm.DB, error) { return open(dsn) }}
	}
	return func(context.Context) ([]fleet.Tenant, error) { return defs, nil }
}

// maxConns is the fleets' MaxConns, as the tables say it.
func maxConns(space *fleetSpace) string {
	if space.conns == 0 {
		return "48, the default"
	}
	return fmt.Sprint(space.conns)
}

// newFleet is a fleet of the default configuration (the relays' too) but
// MaxConns (-conns), logging nothing.
func newFleet(space *fleetSpace, pub message.Publisher, tenants func(context.Context) ([]fleet.Tenant, error), listen ...*gorm.DB) (*fleet.Fleet, error) {
	return fleet.New(pub, fleet.Config{Tenants: tenants, MaxConns: space.conns, Relay: relay.Config{Logger: discardLogger()}, Logger: discardLogger(), Listen: listen})
}

// fleetDrained reads every tenant's figures through f.Stats (after f.Run
// returned) and fails unless there are want tenants, none pending, none
// failing; it returns how long Stats took.
func fleetDrained(f *fleet.Fleet, want int) (time.Duration, error) {
	t0 := time.Now()
	st, err := f.Stats(context.Background())
	took := time.Since(t0)
	if err != nil {
		return took, err
	}
	if len(st) != want {
		return took, fmt.Errorf("the fleet's Stats gave %d tenants, want %d", len(st), want)
	}
	for _, s := range st {
		if s.StatsErr != nil || s.Pending != 0 || s.Failures > 0 {
			why := errors.Join(s.Err, s.StatsErr)
			if why == nil {
				why = errors.New("no error")
			}
			return took, fmt.Errorf("tenant %s at the end: %d pending, %d failures (%w): no figure", s.ID, s.Pending, s.Failures, why)
		}
	}
	return took, nil
}

// burnFigure is one burn-down: its rate, its time and the machine's CPU per
// event.
type burnFigure struct {
	rate  float64
	took  time.Duration
	cpu   cpuUse
	stats time.Duration // the fleet's Stats over its tenants at the end
	stmts map[string]*stmtTime
}

// count is how many statements fig's burn-down ran.
func (fig burnFigure) count() int {
	n := 0
	for _, st := range fig.stmts {
		n += st.n
	}
	return n
}

// fleetBurn is the burn part: in each round, one fleet burns tenants
// outboxes of per events each and one relay burns one outbox of
// tenants×per events, in alternating order.
func fleetBurn(space *fleetSpace, shared bool, tenants, per, rounds int, pubKind string) error {
	bdb, n := space.bdb, tenants*per
	mode := "through one shared pool"
	if !shared {
		mode = "each opened on demand (Tenant.Open)"
	}
	fmt.Printf("Burn-down on %s: one fleet over %d tenants × %d pending events (%s) against one relay over one outbox of %d, "+
		"both unordered, default configurations (the fleet's MaxConns %s), to %s\n\n", bdb.name, tenants, per, mode, n, maxConns(space), pubKind)
	fmt.Println("| round | scenario | events/s | time | CPU per event: all (bench process + database) | statements |")
	fmt.Println("|---|---|---:|---:|---:|---:|")
	var (
		ratios  []float64
		fl, one burnFigure
	)
	for round := range rounds {
		order := []bool{true, false}
		if round%2 == 1 {
			order = []bool{false, true}
		}
		for _, isFleet := range order {
			var err error
			if isFleet {
				fl, err = burnFleet(space, shared, tenants, per, pubKind)
			} else {
				one, err = burnOne(space, n, pubKind)
			}
			if err != nil {
				return err
			}
		}
		fmt.Printf("| %d | fleet, %d tenants × %d | %.0f | %.2f s | %.1f µs (%.1f + %.1f) | %d |\n", round+1, tenants, per, fl.rate, fl.took.Seconds(),
			us(fl.cpu.total()), us(fl.cpu.self), us(fl.cpu.db), fl.count())
		fmt.Printf("| %d | one relay, 1 outbox × %d | %.0f | %.2f s | %.1f µs (%.1f + %.1f) | %d |\n", round+1, n, one.rate, one.took.Seconds(),
			us(one.cpu.total()), us(one.cpu.self), us(one.cpu.db), one.count())
		ratios = append(ratios, fl.rate/one.rate)
		fmt.Fprintf(os.Stderr, "round %d: fleet %.0f/s, one relay %.0f/s, %.0f%%; the fleet's Stats over %d tenants took %s\n",
			round+1, fl.rate, one.rate, 100*fl.rate/one.rate, tenants, fl.stats.Round(time.Millisecond))
	}
	fmt.Printf("\nfleet ÷ one relay, per round: %s (median %.0f%%; goal >= 70%%); the fleet's Stats over its %d tenants at the end took %s\n\n",
		pcts(ratios), 100*medianF(ratios), tenants, fl.stats.Round(time.Millisecond))
	fmt.Printf("The fleet's statements (last round), most time first (%s):\n", stmtsCounted(bdb))
	topStatements(fl.stmts, 10)
	fmt.Println("\nThe relay's statements (last round), most time first:")
	topStatements(one.stmts, 5)
	fmt.Println()
	return nil
}

// burnFleet loads tenants outboxes of per events and burns them with one
// fleet; every tenant must end with nothing pending.
func burnFleet(space *fleetSpace, shared bool, tenants, per int, pubKind string) (burnFigure, error) {
	var fig burnFigure
	bdb := space.bdb
	ts, err := space.tenants("tenant", tenants)
	if err != nil {
		return fig, err
	}
	topic := brokertest.Topic("bench")
	t0 := time.Now()
	if err := space.each(ts, func(db *gorm.DB, _ tenantOutbox) error { return loadOutbox(db, per, topic) }); err != nil {
		return fig, err
	}
	fmt.Fprintf(os.Stderr, "burn: %d events loaded into each of %d tenants in %s\n", per, tenants, time.Since(t0).Round(time.Millisecond))
	open := func(dsn string) (*gorm.DB, error) { return openCounted(bdb, dsn, "herald-bench-fleet") }
	var pool *gorm.DB
	if shared {
		if pool, err = open(space.sharedDSN(ts)); err != nil {
			return fig, err
		}
		defer closeGorm(pool)
	}
	n := tenants * per
	pub, closePub, err := target(pubKind, topic)
	if err != nil {
		return fig, err
	}
	defer closePub()
	cp := &countingPublisher{Publisher: pub, want: int64(n), done: make(chan struct{})}
	f, err := newFleet(space, cp, fleetTenants(ts, pool, open))
	if err != nil {
		return fig, err
	}
	stopProfile, err := startProfile(space.profile)
	if err != nil {
		return fig, err
	}
	cpu0 := fleetCPU(bdb)
	timingStart()
	err = runUntil(f.Run, cp.done)
	fig.stmts = byStatement(timingStop())
	stopProfile()
	if err != nil {
		return fig, fmt.Errorf("fleet: %w", err)
	}
	fig.cpu = fleetCPU(bdb).sub(cpu0).per(n)
	fig.took = publishTook
	fig.rate = float64(n) / publishTook.Seconds()
	if err := verifyDrained(n, cp.n.Load(), nil, 0); err != nil {
		return fig, fmt.Errorf("fleet: %w", err)
	}
	if fig.stats, err = fleetDrained(f, tenants); err != nil {
		return fig, fmt.Errorf("fleet: %w", err)
	}
	return fig, nil
}

// burnOne loads one outbox of n events and burns it with one relay.
func burnOne(space *fleetSpace, n int, pubKind string) (burnFigure, error) {
	var fig burnFigure
	bdb := space.bdb
	ts, err := space.tenants("single", 1)
	if err != nil {
		return fig, err
	}
	topic := brokertest.Topic("bench")
	if err := space.each(ts, func(db *gorm.DB, _ tenantOutbox) error { return loadOutbox(db, n, topic) }); err != nil {
		return fig, err
	}
	db, err := openCounted(bdb, ts[0].dsn, "herald-bench-relay")
	if err != nil {
		return fig, err
	}
	defer closeGorm(db)
	pub, closePub, err := target(pubKind, topic)
	if err != nil {
		return fig, err
	}
	defer closePub()
	cp := &countingPublisher{Publisher: pub, want: int64(n), done: make(chan struct{})}
	r, err := relay.New(db, cp, relay.Config{Logger: discardLogger()})
	if err != nil {
		return fig, err
	}
	cpu0 := fleetCPU(bdb)
	timingStart()
	err = runUntil(r.Run, cp.done)
	fig.stmts = timingStop()
	if err != nil {
		return fig, fmt.Errorf("one relay: %w", err)
	}
	fig.cpu = fleetCPU(bdb).sub(cpu0).per(n)
	fig.took = publishTook
	fig.rate = float64(n) / publishTook.Seconds()
	if err := verifyDrained(n, cp.n.Load(), db, 0); err != nil {
		return fig, fmt.Errorf("one relay: %w", err)
	}
	return fig, nil
}

// tenantName is a tenant's schema or database name in a statement.
var tenantName = regexp.MustCompile(`\b(tenant|cold|hot|single)_[0-9]{4}\b|\bherald_fleet_[0-9a-f]+\b`)

// byStatement merges the times of the statements that differ only by the
// tenant they name.
func byStatement(times map[string]*stmtTime) map[string]*stmtTime {
	out := map[string]*stmtTime{}
	for q, t := range times {
		q = tenantName.ReplaceAllString(q, "<tenant>")
		o := out[q]
		if o == nil {
			o = &stmtTime{}
			out[q] = o
		}
		o.n += t.n
		o.total += t.total
		o.max = max(o.max, t.max)
	}
	return out
}

// fleetCPU is machineCPU with the database's share the bench's server's
// alone: PostgreSQL's cluster or MySQL's server (the machine's other tests
// use both), none on SQLite (in this process).
func fleetCPU(bdb benchDB) cpuUse {
	c := machineCPU()
	my := mysqlCPU()
	switch bdb.name {
	case "postgres":
		c.db -= my
	case "mysql":
		c.db = my
	default:
		c.db = 0
	}
	return c
}

// mysqlCPU is the CPU time MySQL's server (mariadbd or mysqld) used so far.
func mysqlCPU() time.Duration {
	var total time.Duration
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if own, _, _, name, ok := procCPU(e.Name()); ok && (name == "mariadbd" || name == "mysqld") {
			total += own
		}
	}
	return total
}

// stmtsCounted says what openCounted counts on bdb.
func stmtsCounted(bdb benchDB) string {
	if bdb.name == "postgres" {
		return "every statement on the wire, BEGIN and COMMIT too"
	}
	return "Query and Exec calls through database/sql; BEGIN and COMMIT not counted"
}

// stmtTracer times every statement of the pgx connections it is set on,
// BEGIN and COMMIT included, into the capturing driver's timing
// (timingStart, timingStop), on connections that stay pgx's own: the relay's
// LISTEN connection is made from one of them.
type stmtTracer struct{}

type stmtTraceKey struct{}

type stmtTraceStart struct {
	sql string
	at  time.Time
}

func (stmtTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, stmtTraceKey{}, stmtTraceStart{d.SQL, time.Now()})
}

func (stmtTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if s, ok := ctx.Value(stmtTraceKey{}).(stmtTraceStart); ok {
		timed(s.sql, time.Since(s.at))
		if d.Err != nil && ctx.Err() != nil {
			cancelledStmts.Add(1)
		}
	}
}

// cancelledStmts counts the statements stmtTracer saw fail with their
// context ended (pgx closes such a statement's connection).
var cancelledStmts atomic.Int64

// openCounted opens GORM on dsn with its statements counted in the capturing
// driver's timing: on PostgreSQL through pgx with stmtTracer (every
// statement, BEGIN and COMMIT too) and app as the sessions'
// application_name, elsewhere through the capturing driver (its Query and
// Exec calls: not BEGIN and COMMIT).
func openCounted(bdb benchDB, dsn, app string) (*gorm.DB, error) {
	if bdb.name != "postgres" {
		db, err := openCapture(bdb, dsn)
		if err == nil {
			if s, err := db.DB(); err == nil {
				s.SetMaxIdleConns(64)
			}
		}
		return db, err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.Tracer = stmtTracer{}
	cfg.RuntimeParams["application_name"] = app
	s := stdlib.OpenDB(*cfg)
	s.SetMaxIdleConns(64)
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: s}), &gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
	if err != nil {
		_ = s.Close()
	}
	return db, err
}

// idleSample is what the idle part reads at each end of a window.
type idleSample struct {
	at        time.Time
	cpu       cpuUse
	xacts     int64 // PostgreSQL: the bench database's xact_commit + xact_rollback
	sessions  int64 // PostgreSQL: its sessions established
	published int64
	written   int64
}

// sessionCPU follows the CPU time of the bench database's sessions of one
// application_name (PostgreSQL), sampled every 200 ms: a session's CPU
// counts from its first sample in the window (from zero when it started
// within it) to its last, so that a session that ends within the window
// keeps what it used until its last sample.
type sessionCPU struct {
	base, last map[string]time.Duration
	most       int
}

func (c *sessionCPU) see(pids []string, first bool) {
	if c.base == nil {
		c.base, c.last = map[string]time.Duration{}, map[string]time.Duration{}
	}
	c.most = max(c.most, len(pids))
	for _, pid := range pids {
		own, _, _, _, ok := procCPU(pid)
		if !ok {
			continue
		}
		if _, seen := c.base[pid]; !seen {
			c.base[pid] = 0
			if first {
				c.base[pid] = own
			}
		}
		c.last[pid] = own
	}
}

func (c *sessionCPU) total() time.Duration {
	var t time.Duration
	for pid, own := range c.last {
		t += own - c.base[pid]
	}
	return t
}

// idleFigure is one idle run's figures, per second of its window.
type idleFigure struct {
	name            string
	tenants, active int
	stmts, xacts    float64
	self, server    time.Duration // CPU per second
	conns           int           // PostgreSQL: the most sessions of the run's application_name
	sessions        float64       // PostgreSQL: sessions established a second
	cancelled       int64         // PostgreSQL: statements that failed with their context ended
	published       float64
	written         float64
	top             map[string]*stmtTime
}

// sub is f less what is not the relays' (w: the writers' run alone): the
// transactions the writers commit (one an event) and the bench's own
// sampling's (w's less its writes), and this process's CPU with nothing to
// relay (w's: the writers run in a process of their own).
func (f idleFigure) sub(w idleFigure) idleFigure {
	f.xacts -= f.written + max(w.xacts-w.written, 0)
	f.self -= w.self
	return f
}

// idleBench is the idle part's set-up: its tenants and their writers.
type idleBench struct {
	bdb     benchDB
	space   *fleetSpace
	writers []string // the DSNs of the active tenants

	rate int
}

// sample reads the figures of one end of a window.
func (b *idleBench) sample(pub *countingPublisher, written *atomic.Int64) (idleSample, error) {
	s := idleSample{at: time.Now(), cpu: fleetCPU(b.bdb), published: pub.n.Load(), written: written.Load()}
	if b.bdb.name != "postgres" {
		return s, nil
	}
	err := b.space.admin.QueryRow(`SELECT xact_commit + xact_rollback, sessions FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&s.xacts, &s.sessions)
	return s, err
}

// sessions returns the pids of the space database's sessions of
// application_name app.
func (b *idleBench) sessions(app string) ([]string, error) {
	rows, err := b.space.admin.Query(`SELECT pid::text FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, app)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var pids []string
	for rows.Next() {
		var pid string
		if err := rows.Scan(&pid); err != nil {
			return nil, err
		}
		pids = append(pids, pid)
	}
	return pids, rows.Err()
}

// measure runs start (the fleet or the relays; nil: nothing) and, with
// writers, the writers, for warmup, then reads the window's figures.
func (b *idleBench) measure(name string, tenants, active int, writers bool, warmup, window time.Duration, app string,
	start func(ctx context.Context, pub message.Publisher) (func() error, error)) (idleFigure, error) {
	fig := idleFigure{name: name, tenants: tenants, active: active}
	pub := &countingPublisher{Publisher: discardPublisher{}, want: 1 << 62, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := func() error { return nil }
	if start != nil {
		var err error
		if wait, err = start(ctx, pub); err != nil {
			return fig, err
		}
	}
	var written atomic.Int64
	stopWriters := func() error { return nil }
	if writers {
		var err error
		if stopWriters, err = b.startWriters(&written); err != nil {
			cancel()
			return fig, errors.Join(err, wait())
		}
	}
	stop := func() error {
		err := stopWriters()
		cancel()
		return errors.Join(err, wait())
	}
	time.Sleep(warmup)
	var cpus sessionCPU
	follow := func(first bool) {
		if b.bdb.name == "postgres" {
			if pids, err := b.sessions(app); err == nil {
				cpus.see(pids, first)
			}
		}
	}
	follow(true)
	s0, err := b.sample(pub, &written)
	if err != nil {
		_ = stop()
		return fig, err
	}
	timingStart()
	cancelled0 := cancelledStmts.Load()
	deadline := s0.at.Add(window)
	for time.Now().Before(deadline) {
		time.Sleep(min(200*time.Millisecond, time.Until(deadline)))
		follow(false)
	}
	s1, err := b.sample(pub, &written)
	fig.top = byStatement(timingStop())
	fig.cancelled = cancelledStmts.Load() - cancelled0
	if err2 := stop(); err == nil {
		err = err2
	}
	if err != nil {
		return fig, err
	}
	secs := s1.at.Sub(s0.at).Seconds()
	perSec := func(d time.Duration) time.Duration { return time.Duration(float64(d) / secs) }
	for _, st := range fig.top {
		fig.stmts += float64(st.n)
	}
	fig.stmts /= secs
	fig.xacts = float64(s1.xacts-s0.xacts) / secs
	fig.sessions = float64(s1.sessions-s0.sessions) / secs
	fig.conns = cpus.most
	cpu := s1.cpu.sub(s0.cpu)
	fig.self = perSec(cpu.self)
	fig.server = perSec(cpu.db)
	if b.bdb.name == "postgres" {
		fig.server = perSec(cpus.total())
	}
	fig.published = float64(s1.published-s0.published) / secs
	fig.written = float64(s1.written-s0.written) / secs
	return fig, nil
}

// writeAt writes rate events a second to each of dbs, one goroutine each, an
// event a statement (the write bench's raw outbox INSERT, autocommitted: a
// writer that costs this process little beside the relays), until ctx
// ends, counting them in written.
func writeAt(ctx context.Context, bdb benchDB, dbs []*sql.DB, rate int, written *atomic.Int64) error {
	var (
		wg   sync.WaitGroup
		errs = make([]error, len(dbs))
	)
	interval := time.Second / time.Duration(rate)
	for i, db := range dbs {
		wg.Go(func() {
			time.Sleep(interval * time.Duration(i) / time.Duration(len(dbs))) // spread the writers' phases
			t := time.NewTicker(interval)
			defer t.Stop()
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if _, err := db.Exec(bdb.rawOutboxInsert, bdb.rawOutboxArgs(fmt.Sprint(n%1000), benchPayload)...); err != nil {
					errs[i] = err
					return
				}
				written.Add(1)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startWriters starts the writer process (bench fleet-writer) on b's
// active tenants; written follows its count. stop ends it and returns its
// error.
func (b *idleBench) startWriters(written *atomic.Int64) (stop func() error, err error) {
	cmd := exec.Command(os.Args[0], "fleet-writer")
	cmd.Env = append(os.Environ(), "HERALD_BENCH_DB="+b.bdb.name, "HERALD_BENCH_RATE="+strconv.Itoa(b.rate),
		"HERALD_BENCH_DSNS="+strings.Join(b.writers, "\n"))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
				written.Store(n)
			}
		}
	}()
	return func() error {
		_ = in.Close()
		<-read
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("writer process: %w", err)
		}
		return nil
	}, nil
}

// runFleetWriter is the idle part's writer process (bench fleet-writer):
// it writes HERALD_BENCH_RATE events a second to each outbox of
// HERALD_BENCH_DSNS (one a line) on HERALD_BENCH_DB until its standard
// input closes, printing how many it wrote so far every 100 ms and at its
// end.
func runFleetWriter() error {
	bdb, err := pickDB(os.Getenv("HERALD_BENCH_DB"))
	if err != nil {
		return err
	}
	rate, err := strconv.Atoi(os.Getenv("HERALD_BENCH_RATE"))
	if err != nil {
		return fmt.Errorf("HERALD_BENCH_RATE: %w", err)
	}
	var dbs []*sql.DB
	for _, dsn := range strings.Split(os.Getenv("HERALD_BENCH_DSNS"), "\n") {
		db, err := bdb.open(dsn)
		if err != nil {
			return err
		}
		defer closeGorm(db)
		s, err := db.DB()
		if err != nil {
			return err
		}
		dbs = append(dbs, s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	var written atomic.Int64
	done := make(chan error, 1)
	go func() { done <- writeAt(ctx, bdb, dbs, rate, &written) }()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			fmt.Println(written.Load())
			return err
		case <-t.C:
			fmt.Println(written.Load())
		}
	}
}

// fleetIdle is the idle part: one fleet over n tenants, active of them
// written to at rate events a second each; then plain relays (default
// configuration, one per tenant) on relays idle tenants, and on the active
// ones with the same writers; then the writers alone, whose cost the other
// runs' figures are given without.
func fleetIdle(space *fleetSpace, shared bool, n, active, rate, relays int, warmup, window time.Duration) error {
	if n <= active {
		return fmt.Errorf("-idle-tenants %d: fewer than -active %d plus one idle tenant", n, active)
	}
	relays = min(relays, n-active)
	bdb := space.bdb
	ts, err := space.tenants("tenant", n)
	if err != nil {
		return err
	}
	b := &idleBench{bdb: bdb, space: space, rate: rate}
	for _, t := range ts[:active] {
		b.writers = append(b.writers, t.dsn)
	}
	const fleetApp, relayApp, relayPoolConns = "herald-bench-fleet", "herald-bench-relays", 16

	// The fleet, over all n tenants.
	var status []fleet.TenantStatus
	fl, err := b.measure("fleet", n, active, true, warmup, window, fleetApp, func(ctx context.Context, pub message.Publisher) (func() error, error) {
		var pool *gorm.DB
		if shared {
			var err error
			if pool, err = openCounted(bdb, space.sharedDSN(ts), fleetApp); err != nil {
				return nil, err
			}
		}
		f, err := newFleet(space, pub, fleetTenants(ts, pool, func(dsn string) (*gorm.DB, error) { return openCounted(bdb, dsn, fleetApp) }))
		if err != nil {
			return nil, err
		}
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		return func() error {
			err := <-done
			status = f.Status()
			if pool != nil {
				closeGorm(pool)
			}
			return err
		}, nil
	})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	states := map[string]int{}
	for _, s := range status {
		states[s.State]++
		if s.Failures > 0 {
			return fmt.Errorf("fleet: tenant %s failing: %w", s.ID, s.Err)
		}
	}
	// Plain relays, one per tenant: on idle tenants, then on the active ones.
	runRelays := func(on []tenantOutbox) func(ctx context.Context, pub message.Publisher) (func() error, error) {
		return func(ctx context.Context, pub message.Publisher) (func() error, error) {
			var pools []*gorm.DB
			closeAll := func() {
				for _, p := range pools {
					closeGorm(p)
				}
			}
			var pool *gorm.DB
			if bdb.name != "sqlite" { // one pool for them all, as the fleet's
				var err error
				if pool, err = openCounted(bdb, space.sharedDSN(ts), relayApp); err != nil {
					return nil, err
				}
				pools = append(pools, pool)
				if s, err := pool.DB(); err == nil { // beside a LISTEN connection each, within the server's 100
					s.SetMaxOpenConns(relayPoolConns)
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, len(on))
			for i, t := range on {
				db, cfg := pool, relay.Config{Table: t.table, Logger: discardLogger()}
				if db == nil {
					var err error
					if db, err = openCounted(bdb, t.dsn, relayApp); err != nil {
						closeAll()
						return nil, err
					}
					pools = append(pools, db)
					cfg.Table = ""
				}
				r, err := relay.New(db, pub, cfg)
				if err != nil {
					closeAll()
					return nil, err
				}
				wg.Go(func() { errs[i] = r.Run(ctx) })
			}
			return func() error {
				wg.Wait()
				closeAll()
				return errors.Join(errs...)
			}, nil
		}
	}
	idleRelays, err := b.measure("plain relays, idle", relays, 0, false, warmup, window, relayApp, runRelays(ts[active:active+relays]))
	if err != nil {
		return fmt.Errorf("relays: %w", err)
	}
	activeRelays, err := b.measure("plain relays, active", active, active, true, warmup, window, relayApp, runRelays(ts[:active]))
	if err != nil {
		return fmt.Errorf("relays: %w", err)
	}
	alone, err := b.measure("writers alone", 0, active, true, warmup, window, "herald-bench-none", nil)
	if err != nil {
		return err
	}
	perBackend := bdb.name == "postgres"
	fl, idleRelays, activeRelays = fl.sub(alone), idleRelays.sub(alone), activeRelays.sub(alone)
	// n relays, active of them active: the active relays' cost and n-active
	// times an idle relay's.
	k := float64(n-active) / float64(relays)
	est := idleFigure{name: fmt.Sprintf("%d plain relays (estimate: the %d active + %d × an idle one)", n, active, n-active), tenants: n, active: active,
		stmts: activeRelays.stmts + k*idleRelays.stmts, xacts: activeRelays.xacts + k*idleRelays.xacts,
		sessions: activeRelays.sessions + k*idleRelays.sessions,
		self:     activeRelays.self + time.Duration(k*float64(idleRelays.self)), server: activeRelays.server + time.Duration(k*float64(idleRelays.server)),
		conns: -n, published: activeRelays.published + k*idleRelays.published, written: activeRelays.written}

	server := ""
	switch bdb.name {
	case "postgres":
		server = "the CPU of the run's own sessions (by application_name, sampled every 200 ms; the writers' not counted); " +
			"transactions and sessions opened from pg_stat_database of the bench's database, " +
			"less the bench's own sampling"
	case "mysql":
		server = "not shown: MariaDB's CPU is not told by session here (performance_schema off), and the writers' inserts take most of it"
	case "sqlite":
		server = "none: SQLite runs in the bench process"
	}
	pooled := "a pool each"
	if bdb.name != "sqlite" {
		pooled = fmt.Sprintf("one pool shared by the relays, at most %d connections", relayPoolConns)
	}
	fmt.Printf("Idle tenants on %s: one fleet over %d tenants, %d of them written to at %d events/s each (from a process of their own, one raw outbox INSERT an event); "+
		"plain relays (default configuration, one per tenant, %s) on %d idle tenants, then on the %d active ones with the same writers; "+
		"PollInterval 1s everywhere; %s warm-up, then a %s window. Per second of the window, less what the writers' run alone shows is not the relays' "+
		"(the writers' transactions, the bench's own sampling): statements = %s; process CPU = this process (the relays', the publisher's); server CPU = %s.\n\n",
		bdb.name, n, active, rate, pooled, relays, active, warmup, window, stmtsCounted(bdb), server)
	fmt.Println("| run | tenants (active) | statements/s | transactions/s | sessions opened/s | process CPU | server CPU | connections (most) | written/s | published/s |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	pc := func(d time.Duration) string { return fmt.Sprintf("%.1f%%", 100*d.Seconds()) }
	row := func(f idleFigure, stmts, self, written, published string) {
		xacts, sessions, server, conns := "—", "—", pc(f.server), "—"
		if perBackend {
			xacts, sessions, conns = fmt.Sprintf("%.0f", f.xacts), fmt.Sprintf("%.1f", f.sessions), fmt.Sprint(f.conns)
			if f.conns < 0 { // an estimate: a LISTEN connection each, beside their pools
				conns = fmt.Sprintf("≥ %d", -f.conns)
			}
		}
		if !perBackend {
			server = "—"
		}
		fmt.Printf("| %s | %d (%d) | %s | %s | %s | %s | %s | %s | %s | %s |\n", f.name, f.tenants, f.active, stmts, xacts, sessions,
			self, server, conns, written, published)
	}
	for _, f := range []idleFigure{fl, idleRelays, activeRelays, est} {
		row(f, fmt.Sprintf("%.0f", f.stmts), pc(f.self), fmt.Sprintf("%.0f", f.written), fmt.Sprintf("%.0f", f.published))
	}
	alone.name, alone.conns = "writers alone (what is subtracted above)", 0
	row(alone, "—", pc(alone.self), fmt.Sprintf("%.0f", alone.written), "—") // its process CPU: this process, sampling
	ratio := func(a, b float64) string {
		if b <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f%%", 100*a/b)
	}
	fmt.Printf("\nfleet ÷ %d plain relays: statements %s, process CPU %s", n, ratio(fl.stmts, est.stmts), ratio(fl.self.Seconds(), est.self.Seconds()))
	if perBackend {
		fmt.Printf(", server CPU %s, transactions %s, connections %d against at least %d", ratio(fl.server.Seconds(), est.server.Seconds()),
			ratio(fl.xacts, est.xacts), fl.conns, -est.conns)
	}
	fmt.Printf("\nan idle relay: %.2f statements/s, %.2f%% of a core here; the fleet per tenant: %.3f statements/s, %.3f%% of a core\n",
		idleRelays.stmts/float64(relays), 100*idleRelays.self.Seconds()/float64(relays), fl.stmts/float64(n), 100*fl.self.Seconds()/float64(n))
	fmt.Printf("the fleet's tenants at its end: %v; written %.0f/s, published %.0f/s\n\n", states, fl.written, fl.published)
	fmt.Printf("The fleet's statements in its window, most run first (%d failed with their context ended, the relays' %d and %d):\n",
		fl.cancelled, idleRelays.cancelled, activeRelays.cancelled)
	topCounts(fl.top, 8)
	fmt.Println("\nThe idle relays' statements in their window, most run first:")
	topCounts(idleRelays.top, 8)
	fmt.Println()
	return nil
}

// topCounts prints the k statements run most often.
func topCounts(times map[string]*stmtTime, k int) {
	type row struct {
		q string
		t *stmtTime
	}
	var rows []row
	for q, t := range times {
		rows = append(rows, row{q, t})
	}
	slices.SortFunc(rows, func(a, b row) int { return b.t.n - a.t.n })
	for _, r := range rows[:min(k, len(rows))] {
		q := strings.Join(strings.Fields(r.q), " ")
		if len(q) > 140 {
			q = q[:140] + "…"
		}
		fmt.Printf("  - %d runs, mean %.2f ms: `%s`\n", r.t.n, float64(r.t.total)/1e6/float64(r.t.n), q)
	}
}

// fairPublisher counts the hot tenant's messages (and notes when the
// hotAll-th came) and times the others'.
type fairPublisher struct {
	hot     string
	hotAll  int64
	hotN    atomic.Int64
	hotDone atomic.Int64 // unix nanoseconds
	cold    *timingPublisher
}

func (p *fairPublisher) Publish(_ string, msgs ...*message.Message) error {
	cold := make([]*message.Message, 0, len(msgs))
	for _, m := range msgs {
		if m.Metadata.Get(events.MetaTenant) == p.hot {
			if p.hotN.Add(1) == p.hotAll {
				p.hotDone.Store(time.Now().UnixNano())
			}
		} else {
			cold = append(cold, m)
		}
	}
	p.cold.record(cold, nil)
	return nil
}

func (p *fairPublisher) Close() error { return nil }

// fairResult is one fair run's figures.
type fairResult struct {
	lats         []time.Duration // the cold events' commit->publish, sorted
	during       []time.Duration // those of the cold events committed while the hot backlog was pending, sorted
	hotMeanwhile int64           // hot events published while the cold tenants wrote
	window       time.Duration
	hotLeft      int64         // hot events still pending when the cold ones were all published
	hotDrained   time.Duration // when the last hot event was published, from the window's start
}

// wakeMode is how the fair part's cold writers tell the fleet of their
// commits.
type wakeMode int

const (
	wakeFleet  wakeMode = iota // Fleet.Wake, in the writers' process
	wakeNotify                 // relay.Notifier.Tenant, the fleet listening (PostgreSQL)
	wakeNone                   // not at all: the probes find the events
)

// fleetFair is the fair part: cold tenants committing an event a second each
// without a hot tenant, then beside one with a backlog of hot events.
func fleetFair(space *fleetSpace, shared bool, hot, cold int, dur time.Duration, wake wakeMode) error {
	bdb := space.bdb
	fmt.Printf("Fairness on %s: %d cold tenants each committing one event a second (GORM Create with the outbox hook%s) for %s, one fleet (default configuration) "+
		"publishing to a discarding publisher; commit->publish latency of the cold events (commit: Create returned; publish: the publisher's call), "+
		"without and beside a hot tenant's backlog\n\n", bdb.name, cold, []string{", which wakes the fleet (Fleet.Wake)",
		", which notifies its tenant (relay.Notifier.Tenant) where the fleet listens (fleet.Config.Listen)", "; the fleet is not woken"}[wake], dur)
	fmt.Println("| hot tenant's backlog | cold events | p50 | p90 | p99 | max | over 100 ms | hot events published in the window | hot backlog |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, h := range []int{0, hot} {
		r, err := fairRun(space, shared, h, cold, dur, wake)
		if err != nil {
			return err
		}
		hotShown, left := "—", "—"
		if h > 0 {
			ran := r.window
			left = fmt.Sprintf("%d left at the end", r.hotLeft)
			if r.hotLeft == 0 {
				ran = min(ran, r.hotDrained)
				left = fmt.Sprintf("drained %.1f s into the %.1f s window", r.hotDrained.Seconds(), r.window.Seconds())
			}
			hotShown = fmt.Sprintf("%d (%.0f/s)", r.hotMeanwhile, float64(r.hotMeanwhile)/ran.Seconds())
		}
		row := func(what string, l []time.Duration) {
			if len(l) == 0 {
				return
			}
			slow := len(l) - sort.Search(len(l), func(i int) bool { return l[i] > 100*time.Millisecond })
			fmt.Printf("| %s | %d | %s | %s | %s | %s | %d | %s | %s |\n", what, len(l), ms(pct(l, .5)), ms(pct(l, .9)), ms(pct(l, .99)), ms(l[len(l)-1]),
				slow, hotShown, left)
		}
		if h == 0 {
			row("none", r.lats)
			continue
		}
		row(fmt.Sprintf("%d: the cold events committed while it was pending", h), r.during)
		row(fmt.Sprintf("%d: all the cold events", h), r.lats)
	}
	fmt.Println()
	return nil
}

func fairRun(space *fleetSpace, shared bool, hot, cold int, dur time.Duration, wake wakeMode) (fairResult, error) {
	var res fairResult
	bdb := space.bdb
	var ts []tenantOutbox
	if hot > 0 {
		var err error
		if ts, err = space.tenants("hot", 1); err != nil {
			return res, err
		}
		t0 := time.Now()
		if err := space.each(ts, func(db *gorm.DB, _ tenantOutbox) error { return loadOutbox(db, hot, "bench.hot") }); err != nil {
			return res, err
		}
		fmt.Fprintf(os.Stderr, "fair: %d hot events loaded in %s\n", hot, time.Since(t0).Round(time.Millisecond))
	}
	colds, err := space.tenants("tenant", cold)
	if err != nil {
		return res, err
	}
	if err := space.each(colds, func(db *gorm.DB, _ tenantOutbox) error { return db.AutoMigrate(&benchOrder{}) }); err != nil {
		return res, err
	}
	ts = append(ts, colds...)
	var pool *gorm.DB
	if shared {
		if pool, err = bdb.open(space.sharedDSN(ts)); err != nil {
			return res, err
		}
		defer closeGorm(pool)
	}
	pub := &fairPublisher{hot: "hot_0000", hotAll: int64(hot), cold: newTimingPublisher()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		notifier *relay.Notifier
		listen   []*gorm.DB
	)
	if wake == wakeNotify { // one handle on the bench's database: the writers notify there, the fleet listens there
		ndb, err := bdb.open(space.dsn)
		if err != nil {
			return res, err
		}
		defer closeGorm(ndb)
		if notifier, err = relay.NewNotifier(ndb, relay.NotifierConfig{Logger: discardLogger()}); err != nil {
			return res, err
		}
		go func() { _ = notifier.Run(ctx) }()
		listen = append(listen, ndb)
	}
	f, err := newFleet(space, pub, fleetTenants(ts, pool, bdb.open), listen...)
	if err != nil {
		return res, err
	}
	writers := make([]*gorm.DB, len(colds))
	for i, t := range colds {
		id := t.id
		notify := func() {}
		switch wake {
		case wakeFleet:
			notify = func() { f.Wake(id) }
		case wakeNotify:
			notify = notifier.Tenant(id)
		}
		db, err := bdb.open(t.dsn)
		if err != nil {
			return res, err
		}
		defer closeGorm(db)
		if err := db.Use(outboxhook.New(outboxhook.Config{Notify: notify})); err != nil {
			return res, err
		}
		writers[i] = db
	}
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	stopFleet := func() error {
		cancel()
		return <-done
	}
	if hot > 0 { // the cold tenants start writing once the hot one is being relayed
		start := time.Now()
		for pub.hotN.Load() == 0 && time.Since(start) < time.Minute {
			time.Sleep(10 * time.Millisecond)
		}
		if pub.hotN.Load() == 0 {
			_ = stopFleet()
			return res, errors.New("the hot tenant was not relayed within a minute")
		}
	} else {
		time.Sleep(time.Second)
	}

	var (
		mu        sync.Mutex
		committed = map[string]time.Time{}
		wg        sync.WaitGroup
		errs      = make([]error, cold)
	)
	hot0, start := pub.hotN.Load(), time.Now()
	deadline := start.Add(dur)
	for i, db := range writers {
		wg.Go(func() {
			time.Sleep(time.Second * time.Duration(i) / time.Duration(cold)) // spread the writers' phases
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for time.Now().Before(deadline) {
				o := &benchOrder{ID: uuid.New(), Status: "placed", Amount: 1}
				o.Record(orderPlaced{OrderID: o.ID, Amount: 1})
				id := o.Records()[0].ID.String()
				if err := db.Create(o).Error; err != nil {
					errs[i] = err
					return
				}
				now := time.Now()
				mu.Lock()
				committed[id] = now
				mu.Unlock()
				<-t.C
			}
		})
	}
	wg.Wait()
	res.window = time.Since(start)
	res.hotMeanwhile = pub.hotN.Load() - hot0
	if err := errors.Join(errs...); err != nil {
		_ = stopFleet()
		return res, err
	}
	published := func() (map[string]time.Time, bool) {
		pub.cold.mu.Lock()
		defer pub.cold.mu.Unlock()
		for id := range committed {
			if _, ok := pub.cold.at[id]; !ok {
				return nil, false
			}
		}
		return maps.Clone(pub.cold.at), true
	}
	var at map[string]time.Time
	for limit := time.Now().Add(30 * time.Second); time.Now().Before(limit); time.Sleep(20 * time.Millisecond) {
		var ok bool
		if at, ok = published(); ok {
			break
		}
	}
	res.hotLeft = int64(hot) - pub.hotN.Load()
	if at := pub.hotDone.Load(); at > 0 {
		res.hotDrained = time.Unix(0, at).Sub(start)
	}
	if err := stopFleet(); err != nil {
		return res, err
	}
	if at == nil {
		return res, fmt.Errorf("%d cold events committed; not all published within 30 s of the last", len(committed))
	}
	drained := time.Unix(0, pub.hotDone.Load())
	for id, c := range committed {
		l := max(at[id].Sub(c), 0)
		res.lats = append(res.lats, l)
		if hot > 0 && (pub.hotDone.Load() == 0 || c.Before(drained)) {
			res.during = append(res.during, l)
		}
	}
	slices.Sort(res.lats)
	slices.Sort(res.during)
	if len(res.lats) == 0 {
		return res, errors.New("no cold event committed")
	}
	return res, nil
}
