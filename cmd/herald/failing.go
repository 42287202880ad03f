package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/heraldgo/herald/admin"
)

// failing shows the failing events: pending events whose publish failed at
// least once, which the relays retry. By default it groups them by type and
// last error (what one cause holds up); --events lists them one by one.
func (c *cli) failing(args []string) int {
	fs := c.flags("failing", `failing [--type T] [--events] [--limit N] [--json] [--table T]

Shows why pending events fail: the events whose publish failed at least once
(not dead yet: the relays retry them), grouped by type and last error, the
largest group first: how many, the most attempts of one, the soonest next
attempt, the latest failure, the last error. With --events it lists the events
instead, soonest next attempt first: id, type, aggregate, attempts, strikes,
when it failed last, its next attempt, its last error.`)
	typ := fs.String("type", "", "only events of this type")
	events := fs.Bool("events", false, "list the events, not their groups")
	limit := fs.Int("limit", 100, "list at most this many groups (with --events: events)")
	asJSON := fs.Bool("json", false, "print JSON (without payloads)")
	o, done, code, ok := c.openList(fs, args, limit)
	if !ok {
		return code
	}
	defer done()
	f := admin.FailingFilter{Type: *typ}
	if *events {
		evs, err := o.Failing(c.ctx, f, *limit)
		if err != nil {
			return c.fail(err)
		}
		return listRows(c, evs, *asJSON, *limit, "no failing events", "", c.printFailing)
	}
	gs, err := o.FailingGroups(c.ctx, f, *limit)
	if err != nil {
		return c.fail(err)
	}
	return listRows(c, gs, *asJSON, *limit, "no failing events", " groups", c.printGroups)
}

// stamp formats a time of the database's; "-" for none.
func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// printGroups lists gs, one line each.
func (c *cli) printGroups(gs []admin.FailureGroup) {
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "TYPE\tEVENTS\tMAX ATTEMPTS\tNEXT ATTEMPT\tLAST FAILED\tLAST ERROR")
	for _, g := range gs {
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", printable(g.Type), g.Events, g.MaxAttempts,
			stamp(&g.NextAttemptAt), stamp(g.LastFailedAt), printable(clip(160, g.LastError)))
	}
	_ = tw.Flush()
}

// printFailing lists evs, one line each.
func (c *cli) printFailing(evs []admin.FailingEvent) {
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ID\tTYPE\tAGGREGATE\tATTEMPTS\tSTRIKES\tLAST FAILED\tNEXT ATTEMPT\tLAST ERROR")
	for _, e := range evs {
		agg := aggregateCell(e.Aggregate())
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", printable(e.ID), printable(e.Type), agg, e.Attempts, e.Strikes,
			stamp(e.LastFailedAt), stamp(&e.NextAttemptAt), printable(clip(100, e.LastError)))
	}
	_ = tw.Flush()
}
