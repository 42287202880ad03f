package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/relay"
)

// scheduled runs "herald scheduled list|cancel|publish-now".
func (c *cli) scheduled(args []string) int {
	if len(args) == 0 {
		c.cmd = "scheduled"
		return c.usageError(errors.New("say list, cancel or publish-now"))
	}
	switch args[0] {
	case "list":
		return c.scheduledList(args[1:])
	case "cancel":
		return c.reschedule(args[1:], false)
	case "publish-now":
		return c.reschedule(args[1:], true)
	}
	c.cmd = "scheduled"
	return c.usageError(fmt.Errorf("unknown command %q (list, cancel or publish-now)", args[0]))
}

func (c *cli) scheduledList(args []string) int {
	fs := c.flags("scheduled list", `scheduled list [--overdue] [--limit N] [--json] [--table T]

Lists the scheduled events (saved to be published later) that are neither
published nor dead, soonest due first: id, type, aggregate, key, when it is
(or was) due, attempts. An event due and not published yet is overdue: a
relay publishes it within a PollInterval of its due time, unless it fails
("herald failing" says why) or no relay runs. "herald status" shows how many
there are, when the next is due and how long the earliest due one has waited.`)
	overdue := fs.Bool("overdue", false, "only the events already due and not published yet")
	limit := fs.Int("limit", 100, "list at most this many")
	asJSON := fs.Bool("json", false, "print JSON (without payloads)")
	o, done, code, ok := c.openList(fs, args, limit)
	if !ok {
		return code
	}
	defer done()
	evs, err := o.Scheduled(c.ctx, admin.ScheduledFilter{Overdue: *overdue}, *limit)
	if err != nil {
		return c.fail(err)
	}
	none := "no scheduled events"
	if *overdue {
		none = "no overdue scheduled events"
	}
	return listRows(c, evs, *asJSON, *limit, none, "", c.printScheduled)
}

// printScheduled lists evs, one line each.
func (c *cli) printScheduled(evs []admin.ScheduledEvent) {
	now := time.Now()
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ID\tTYPE\tAGGREGATE\tKEY\tDUE\t\tATTEMPTS")
	for _, e := range evs {
		key := printable(e.Key)
		if key == "" {
			key = "-"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", printable(e.ID), printable(e.Type), aggregateCell(e.Aggregate()), key,
			stamp(&e.DueAt), dueIn(now, e.DueAt), e.Attempts)
	}
	_ = tw.Flush()
}

// dueIn says when t is due from now: "in 59m59s", or "10m0s ago".
func dueIn(now, t time.Time) string {
	if d := t.Sub(now).Truncate(time.Second); d > 0 {
		return "in " + admin.Age(d)
	}
	return admin.Age(now.Sub(t).Truncate(time.Second)) + " ago"
}

// reschedule cancels the scheduled event the command line names or, with
// now, makes it due now.
func (c *cli) reschedule(args []string, now bool) int {
	cmd, synopsis := "scheduled cancel", `scheduled cancel [--table T] ID

Cancels a scheduled event that is not due yet: it is deleted and never
published. An event due already (being published, or waiting for a retry),
published or dead cannot be cancelled: it fails (exit 1) and says which.`
	if now {
		cmd, synopsis = "scheduled publish-now", `scheduled publish-now [--channel C] [--table T] ID

Makes a scheduled event that is not due yet due now (its metadata's
herald_due_at too): the relays publish it at their next poll (on PostgreSQL
they are woken at once, through --channel). An event due already, published
or dead is left alone: it fails (exit 1) and says which.`
	}
	fs := c.flags(cmd, synopsis)
	channel := relay.DefaultChannel
	if now {
		fs.StringVar(&channel, "channel", relay.DefaultChannel, "PostgreSQL: the LISTEN/NOTIFY channel that wakes the relays (relay.Config.Channel)")
	}
	pos, err := c.parse(fs, args, true)
	if err != nil {
		return c.usageError(err)
	}
	if pos == nil {
		return exitOK
	}
	if _, err := ident.ParseName(channel); err != nil {
		return c.usageError(fmt.Errorf("--channel: %w", err))
	}
	if len(pos) != 1 {
		return c.usageError(errors.New("give one event id"))
	}
	id, err := parseID(pos[0])
	if err != nil {
		return c.usageError(err)
	}
	o, done, err := c.open(admin.Config{Channel: channel})
	if err != nil {
		return c.fail(err)
	}
	defer done()
	do := o.CancelScheduled
	if now {
		do = o.PublishNow
	}
	out, err := do(c.ctx, id)
	if err != nil {
		return c.fail(err)
	}
	if !out.Changed() {
		return c.fail(errors.New(notChanged(out, id, now)))
	}
	if now {
		c.printf("scheduled event %s is due now: the relays publish it\n", id)
	} else {
		c.printf("cancelled scheduled event %s: it will not be published\n", id)
	}
	return exitOK
}

// notChanged says why the scheduled event id was left alone.
func notChanged(out admin.ScheduleOutcome, id uuid.UUID, now bool) string {
	verb := "nothing cancelled"
	if now {
		verb = "nothing changed"
	}
	switch out {
	case admin.ScheduleDue:
		return fmt.Sprintf("scheduled event %s is due already (being published, or waiting for a retry: herald failing): %s", id, verb)
	case admin.SchedulePublished:
		return fmt.Sprintf("scheduled event %s was published already: %s", id, verb)
	case admin.ScheduleDead:
		return fmt.Sprintf("scheduled event %s came due and went dead (herald dead show %s): %s", id, id, verb)
	}
	return fmt.Sprintf("no scheduled event %s (cancelled, published and deleted, or never scheduled): %s", id, verb)
}
