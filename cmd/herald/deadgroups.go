package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/relay"
)

func (c *cli) deadGroups(args []string) int {
	fs := c.flags("dead groups", `dead groups [--limit N] [--json] [--table T]

Groups the dead events by type and last error, with what varies from one event
to the next stripped from the error (numbers, ids, UUIDs, hex, IP addresses:
"timeout after 5s to 10.0.0.7" and "timeout after 9s to 10.0.0.9" are one
group), the largest group first: how many events, the first and latest death,
a sample error, and the group's key, which "herald dead requeue --group KEY"
and "herald dead purge --group KEY" act on. The key covers the deaths up to
the latest listed: an event that dies after the listing is not taken.`)
	limit := fs.Int("limit", 50, "list at most this many groups")
	asJSON := fs.Bool("json", false, "print JSON")
	o, done, code, ok := c.openList(fs, args, limit)
	if !ok {
		return code
	}
	defer done()
	gs, err := o.DeadGroups(c.ctx, *limit)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		c.printJSON(gs)
		return exitOK
	}
	if len(gs.Groups) == 0 {
		c.printf("no dead events\n")
		return exitOK
	}
	for i, g := range gs.Groups {
		if i > 0 {
			c.printf("\n")
		}
		c.printf("%s: %s\n", printable(g.Type), printable(g.Error))
		c.printf("  %s, died %s to %s\n", plural(g.Events, "dead event"), g.FirstSeen.Format("2006-01-02 15:04:05Z"), g.LastSeen.Format("2006-01-02 15:04:05Z"))
		c.printf("  sample: %s\n", printable(clip(200, g.Sample)))
		c.printf("  key:    %s\n", g.Key)
	}
	if gs.More > 0 {
		c.printf("\n(%s more; --limit shows more)\n", plural(int64(gs.More), "group"))
	}
	if gs.Truncated {
		c.printf("\n(the groups cover the oldest %d dead events only)\n", gs.Scanned)
	}
	return exitOK
}

// deadGroupAction is dead requeue and dead purge: the action on the group
// --group names.
func (c *cli) deadGroupAction(verb string, args []string) int {
	synopsis := `dead requeue --group KEY [--dry-run] [--by NAME] [--table T]

Makes the dead events of one group ("herald dead groups" lists the groups and
their keys) pending again, due now, keeping their places in each aggregate's
order, in one transaction; the relays publish them at their next poll (on
PostgreSQL they are woken at once, through --channel). Only the group's events
that died by the latest death the listing saw are taken: run twice, the second
run finds nothing. Recorded in the audit trail ("herald dead audit") with
--by.`
	if verb == "purge" {
		synopsis = `dead purge --group KEY [--older-than D] [--dry-run] [--by NAME] [--table T]

Deletes the dead events of one group ("herald dead groups" lists the groups
and their keys); with --older-than only those that died more than D ago, the
others are kept. Only the group's events that died by the latest death the
listing saw are taken: run twice, the second run finds nothing. Recorded in
the audit trail ("herald dead audit") with --by.`
	}
	fs := c.flags("dead "+verb, synopsis)
	group := fs.String("group", "", "the group's key, from herald dead groups (required)")
	dryRun := fs.Bool("dry-run", false, "say how many events it would take, and change nothing")
	by := fs.String("by", defaultActor(c.getenv), "who acts, for the audit trail")
	channel := relay.DefaultChannel
	var olderThan *durationFlag
	if verb == "purge" {
		olderThan = c.durationVar(fs, "older-than", "", "only the group's events that died more than this long ago ("+durationHint+")")
	} else {
		fs.StringVar(&channel, "channel", relay.DefaultChannel, "PostgreSQL: the LISTEN/NOTIFY channel that wakes the relays (relay.Config.Channel)")
	}
	if code, ok := c.parseNone(fs, args); !ok {
		return code
	}
	if *group == "" {
		return c.usageError(errors.New("--group: required (herald dead groups lists the keys)"))
	}
	k, err := admin.ParseDeadGroupKey(*group)
	if err != nil {
		return c.usageError(fmt.Errorf("--group: %w", err))
	}
	if _, err := ident.ParseName(channel); err != nil {
		return c.usageError(fmt.Errorf("--channel: %w", err))
	}
	// The action's own log line (Info) is what this command prints: only
	// warnings go to stderr.
	quiet := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o, done, err := c.open(admin.Config{Channel: channel, Logger: quiet})
	if err != nil {
		return c.fail(err)
	}
	defer done()
	a := admin.GroupAction{DryRun: *dryRun, By: *by}
	if olderThan != nil {
		a.OlderThan = olderThan.d
	}
	act, past := o.RequeueGroup, "requeued"
	if verb == "purge" {
		act, past = o.PurgeGroup, "purged"
	}
	res, err := act(c.ctx, k, a)
	if err != nil {
		return c.fail(err)
	}
	what := fmt.Sprintf(" of type %s with error %q", printable(k.Type), printable(k.Error))
	if a.OlderThan > 0 {
		what += " that died more than " + olderThan.raw + " ago"
	}
	switch {
	case res.DryRun:
		c.printf("dry run: would %s %s%s\n", verb, plural(res.Events, "dead event"), what)
	case res.Events == 0:
		c.printf("no dead events%s left to %s (done already?): nothing %s\n", what, verb, past)
	default:
		c.printf("%s %s%s\n", past, plural(res.Events, "dead event"), what)
	}
	return exitOK
}

// defaultActor names the person at the terminal for the audit trail:
// "cli user@host".
func defaultActor(getenv func(string) string) string {
	user := getenv("USER")
	if user == "" {
		user = getenv("USERNAME")
	}
	if user == "" {
		user = "unknown"
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		user += "@" + host
	}
	return "cli " + user
}

func (c *cli) deadAudit(args []string) int {
	fs := c.flags("dead audit", `dead audit [--limit N] [--json] [--table T]

Lists the audit trail of the bulk actions on dead events (groups requeued or
purged), the newest first: when (the database's clock), by whom, what, on
which group, how many events.`)
	limit := fs.Int("limit", 50, "list at most this many")
	asJSON := fs.Bool("json", false, "print JSON")
	o, done, code, ok := c.openList(fs, args, limit)
	if !ok {
		return code
	}
	defer done()
	es, err := o.Audit(c.ctx, *limit)
	if err != nil {
		return c.fail(err)
	}
	return listRows(c, es, *asJSON, *limit, "no bulk action recorded", "", func(es []admin.AuditEntry) {
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "AT\tBY\tACTION\tEVENTS\tDETAIL")
		for _, e := range es {
			_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", e.At.Format(time.RFC3339), printable(e.By), printable(e.Action), e.Events, printable(e.Detail))
		}
		_ = tw.Flush()
	})
}
