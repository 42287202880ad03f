package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/walrelay"
)

func (c *cli) status(args []string) int {
	fs := c.flags("status", `status [--json] [--max-age D] [--wal-slot S] [--max-wal-lag N] [--tenants PATTERN] [--table T]

Shows, per topic and in total, the pending events, those of them that failed
at least once (failing), the dead events, the age of the oldest pending event
and, when a relay Retention keeps published events, how many were published in
the last minute; then the scheduled events (saved to be published later): how
many are not published yet, when the next is due, and how long ago the
earliest due one came due while still unpublished (overdue). A scheduled
event's age counts from its due time, once due. Exits with 3 when the outbox is unhealthy: dead events, or a
pending event older than --max-age (5m by default; 90m, 36h, 7d, 1d12h), for
cron and health checks. A requeued event's age counts from its requeue.
"herald failing" shows why the failing events fail.

On PostgreSQL it also shows the WAL relay's replication slot (events kept in
the WAL, outboxhook StorageWAL): --wal-slot's, or the slot "herald" when it
exists. It says whether a relay streams it, its wal_status, its lag (the WAL
written since the position the relay last confirmed), the WAL the server keeps
for it and the time since the relay last reported. A missing or invalidated
slot, or one lagging past --max-wal-lag (1GiB by default), is unhealthy. With
--wal-slot the outbox table may be missing (StorageWAL keeps none).

With --tenants it shows, instead, one line per tenant of a fleet (package
fleet): each schema (MySQL: database) of DATABASE_URL's server whose name
matches the LIKE pattern and that holds --table, or on SQLite each file
matching the glob, opened with DATABASE_URL's settings; the tenants whose
figures cannot be read, then the unhealthy ones, then by the age of the oldest
pending event. Exits with 3 when one is unhealthy.`)
	asJSON := fs.Bool("json", false, "print JSON")
	maxAge := c.durationVar(fs, "max-age", "5m", "an oldest pending event older than this is unhealthy ("+durationHint+"); 0: never")
	walSlot := fs.String("wal-slot", "", `the WAL relay's replication slot (default: "herald" when it exists)`)
	tenants := fs.String("tenants", "", `a tenant per schema (MySQL: database) whose name matches this LIKE pattern and holds --table, or on SQLite per file matching this glob: each tenant's totals, the worst first`)
	maxLag := c.sizeVar(fs, "max-wal-lag", "1GiB", "a WAL slot lagging more than this is unhealthy ("+sizeHint+"); 0: never")
	if code, ok := c.parseNone(fs, args); !ok {
		return code
	}
	cfg := admin.Config{MaxAge: maxAge.d, WALSlot: *walSlot, MaxWALLag: maxLag.n}
	if maxAge.d == 0 {
		cfg.MaxAge = -1
	}
	if maxLag.n == 0 {
		cfg.MaxWALLag = -1
	}
	if *tenants != "" {
		if *walSlot != "" {
			return c.usageError(errors.New("--tenants and --wal-slot: one or the other"))
		}
		return c.statusTenants(*tenants, cfg, *asJSON)
	}
	db, t, err := c.openDB(true)
	if err != nil {
		return c.fail(err)
	}
	switch {
	case *walSlot != "" && !t.wal():
		closeDB(db)
		return c.usageError(fmt.Errorf("--wal-slot: the WAL relay needs PostgreSQL; DATABASE_URL is a %s database", t.dialect))
	case *walSlot == "" && t.wal():
		if sqlDB, err := db.DB(); err == nil {
			// Slot names are the server's: only a slot of this database.
			if w, err := walrelay.ReadSlot(c.ctx, sqlDB, walrelay.DefaultSlot); err == nil && w.Exists && w.Database == w.CurrentDatabase {
				cfg.WALSlot = walrelay.DefaultSlot
			}
		}
	}
	o, done, err := c.openOutbox(db, t, cfg)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	s, err := o.Status(c.ctx)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		c.printJSON(s)
	} else {
		c.printStatus(s)
	}
	if !s.Healthy {
		return exitUnhealthy
	}
	return exitOK
}

func (c *cli) printStatus(s admin.Status) {
	c.printf("%s on %s, %s\n\n", printable(s.Table), printable(s.Database), s.At.Format("2006-01-02 15:04:05Z"))
	if s.WAL != nil {
		c.printWAL(s.WAL)
	}
	if s.TableMissing {
		c.printf("no table %s: the events are kept in the WAL\n\n", printable(s.Table))
		c.printHealth(s)
		return
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	head := []string{"TOPIC", "PENDING", "FAILING", "DEAD", "OLDEST PENDING"}
	if s.RetainsPublished {
		head = append(head, "PUBLISHED LAST MINUTE")
	}
	_, _ = fmt.Fprintln(tw, strings.Join(head, "\t"))
	row := func(name string, f admin.Figures) {
		age := "-"
		if f.Pending > 0 {
			age = admin.Age(f.OldestPending())
		}
		cells := []string{name, fmt.Sprint(f.Pending), fmt.Sprint(f.Failing), fmt.Sprint(f.Dead), age}
		if s.RetainsPublished && f.PublishedLastMinute != nil {
			cells = append(cells, fmt.Sprint(*f.PublishedLastMinute))
		}
		_, _ = fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	for _, f := range s.Topics {
		row(printable(f.Topic), f)
	}
	row("total", s.Total)
	_ = tw.Flush()
	c.printf("\n")
	if s.Total.Failing > 0 {
		c.printf("%s: herald failing shows why\n", plural(s.Total.Failing, "failing event"))
	}
	if sf := s.Scheduled; sf != nil && sf.Count > 0 {
		line := plural(sf.Count, "scheduled event")
		if d := sf.NextDue().Truncate(time.Second); d > 0 {
			line += ", the next due in " + admin.Age(d)
		}
		if d := sf.Overdue(); d > 0 {
			line += "; overdue: the earliest due one came due " + admin.Age(d) + " ago, unpublished"
		}
		c.printf("%s: herald scheduled list shows them\n", line)
	}
	if s.Relays != nil {
		c.printf("%s\n", relaysLine(*s.Relays))
	}
	c.printHealth(s)
}

func (c *cli) printHealth(s admin.Status) {
	if s.Healthy {
		c.printf("healthy\n")
	} else {
		c.printf("unhealthy: %s\n", printable(strings.Join(s.Problems, "; ")))
	}
}

// relaysLine says whether relays are alive, in one line, healthy or not.
func relaysLine(r admin.Relays) string {
	switch {
	case !r.Known:
		return "relays: none has recorded a heartbeat on this outbox yet"
	case r.Alive > 0:
		line := fmt.Sprintf("relays: %d alive", r.Alive)
		if r.LastSeenSeconds != nil {
			line += ", last seen " + admin.Age(time.Duration(*r.LastSeenSeconds*float64(time.Second)).Truncate(time.Second)) + " ago"
		}
		return line
	case r.LastSeenSeconds != nil:
		return "relays: none alive, the last seen " + admin.Age(time.Duration(*r.LastSeenSeconds*float64(time.Second)).Truncate(time.Second)) + " ago"
	}
	return "relays: none alive"
}
