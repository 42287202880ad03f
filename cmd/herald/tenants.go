package main

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/drivers"
)

// tenantStatus is one tenant's outbox status, for --tenants.
type tenantStatus struct {
	Tenant string        `json:"tenant"`
	Status *admin.Status `json:"status,omitempty"`
	Error  string        `json:"error,omitempty"`
	// ServedBy is the relay instance (relay.Config.InstanceID; a fleet's
	// relays run under the fleet process's) that beat most recently in the
	// tenant's relays table, ServedAgoSeconds how long ago by the database's
	// clock; both absent when none ever did (or its row is gone).
	ServedBy         string   `json:"served_by,omitempty"`
	ServedAgoSeconds *float64 `json:"served_ago_seconds,omitempty"`
}

// tenantsReport is status --tenants's result.
type tenantsReport struct {
	Table   string         `json:"table"`
	At      time.Time      `json:"at"`
	Tenants []tenantStatus `json:"tenants"`
	Healthy bool           `json:"healthy"`
}

// statusTenants prints the status of every tenant's outbox, the worst first:
// on PostgreSQL and MySQL the schemas (databases) of DATABASE_URL's server
// whose name matches the LIKE pattern and that hold --table; on SQLite the
// files matching the glob pattern. A tenant whose figures cannot be read is
// unhealthy with its error.
func (c *cli) statusTenants(pattern string, cfg admin.Config, asJSON bool) int {
	if strings.Contains(c.table, ".") {
		return c.usageError(errors.New("--tenants: --table names the table in each tenant's schema, unqualified"))
	}
	t, err := parseURL(c.getenv("DATABASE_URL"))
	if err != nil {
		return c.fail(err)
	}
	rep := tenantsReport{Table: c.table, At: time.Now().UTC(), Healthy: true}
	add := func(name string, s admin.Status, err error) {
		ts := tenantStatus{Tenant: name}
		if err != nil {
			ts.Error = err.Error()
		} else {
			ts.Status = &s
			ts.ServedBy, ts.ServedAgoSeconds = servedBy(s.Relays)
		}
		rep.Tenants = append(rep.Tenants, ts)
		rep.Healthy = rep.Healthy && err == nil && s.Healthy
	}
	if t.file != "" {
		files, err := filepath.Glob(pattern)
		if err != nil {
			return c.usageError(fmt.Errorf("--tenants: %w", err))
		}
		for _, f := range files {
			s, err := c.tenantFile(t, f, cfg)
			add(f, s, err)
		}
	} else {
		db, err := open(c.ctx, t, true)
		if err != nil {
			return c.fail(err)
		}
		defer closeDB(db)
		conn, err := drivers.Open(db, "")
		if err != nil {
			return c.fail(err)
		}
		schemas, err := conn.Driver.Schemas(c.ctx, conn.DB, pattern, c.table)
		if err != nil {
			return c.fail(fmt.Errorf("list the tenants: %w", err))
		}
		for _, schema := range schemas {
			cfg := cfg
			cfg.Table = schema + "." + c.table
			s, err := c.tenantStatus(func() (*admin.Outbox, error) { return admin.Open(c.ctx, db, cfg) })
			add(schema, s, err)
		}
	}
	slices.SortStableFunc(rep.Tenants, worstFirst)
	if asJSON {
		c.printJSON(rep)
	} else {
		c.printTenants(rep)
	}
	if !rep.Healthy {
		return exitUnhealthy
	}
	return exitOK
}

// tenantFile reads the status of the outbox in the SQLite file f, opened
// with DATABASE_URL's settings (the URL of base's file).
func (c *cli) tenantFile(base target, f string, cfg admin.Config) (admin.Status, error) {
	t, err := parseURL(strings.Replace(c.getenv("DATABASE_URL"), base.file, f, 1))
	if err != nil {
		return admin.Status{}, err
	}
	db, err := open(c.ctx, t, true)
	if err != nil {
		return admin.Status{}, err
	}
	defer closeDB(db)
	cfg.Table = c.table
	return c.tenantStatus(func() (*admin.Outbox, error) { return admin.Open(c.ctx, db, cfg) })
}

func (c *cli) tenantStatus(open func() (*admin.Outbox, error)) (admin.Status, error) {
	o, err := open()
	if err != nil {
		return admin.Status{}, err
	}
	return o.Status(c.ctx)
}

// servedBy returns the relay instance that beat most recently in rs's
// instance table (read by Status already: no other read) and how many
// seconds ago; "" and nil when none did.
func servedBy(rs *admin.Relays) (string, *float64) {
	if rs == nil {
		return "", nil
	}
	var by string
	var ago *float64
	for _, in := range rs.Instances {
		if in.SeenSecondsAgo != nil && (ago == nil || *in.SeenSecondsAgo < *ago) {
			by, ago = in.Instance, in.SeenSecondsAgo
		}
	}
	return by, ago
}

// worstFirst orders tenants: unreadable, then unhealthy, then by the oldest
// pending event's age and the backlog, then by name.
func worstFirst(a, b tenantStatus) int {
	rank := func(t tenantStatus) int {
		switch {
		case t.Status == nil:
			return 0
		case !t.Status.Healthy:
			return 1
		}
		return 2
	}
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	if a.Status != nil && b.Status != nil {
		if c := cmp.Compare(b.Status.Total.OldestPendingSeconds, a.Status.Total.OldestPendingSeconds); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Status.Total.Pending, a.Status.Total.Pending); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.Tenant, b.Tenant)
}

func (c *cli) printTenants(rep tenantsReport) {
	c.printf("%s of %s, %s\n\n", plural(int64(len(rep.Tenants)), "tenant"), printable(rep.Table), rep.At.Format("2006-01-02 15:04:05Z"))
	if len(rep.Tenants) == 0 {
		c.printf("no tenant matches\n")
		return
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "TENANT\tPENDING\tFAILING\tDEAD\tOLDEST PENDING\tSERVED BY\tHEALTH")
	unhealthy := 0
	for _, t := range rep.Tenants {
		if t.Status == nil {
			unhealthy++
			_, _ = fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%s\n", printable(t.Tenant), printable("error: "+t.Error))
			continue
		}
		f := t.Status.Total
		age, health := "-", "healthy"
		if f.Pending > 0 {
			age = admin.Age(f.OldestPending())
		}
		if !t.Status.Healthy {
			unhealthy++
			health = "unhealthy: " + strings.Join(t.Status.Problems, "; ")
		}
		served := "-"
		if t.ServedAgoSeconds != nil {
			ago := time.Duration(*t.ServedAgoSeconds * float64(time.Second)).Truncate(time.Second)
			served = printable(t.ServedBy) + " (" + admin.Age(ago) + " ago)"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\n", printable(t.Tenant), f.Pending, f.Failing, f.Dead, age, served, printable(health))
	}
	_ = tw.Flush()
	c.printf("\n")
	if unhealthy == 0 {
		c.printf("healthy\n")
	} else {
		c.printf("unhealthy: %d of %s\n", unhealthy, plural(int64(len(rep.Tenants)), "tenant"))
	}
}
