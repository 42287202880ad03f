package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/relay"
)

func (c *cli) deadList(args []string) int {
	fs := c.flags("dead list", `dead list [--type T] [--older-than D] [--limit N] [--json] [--table T]

Lists the dead events, oldest death first: id, type, aggregate, attempts,
strikes (failures confirmed by a later publish), when it died, last error.`)
	typ := fs.String("type", "", "only events of this type")
	olderThan := c.durationVar(fs, "older-than", "", "only events that died more than this long ago ("+durationHint+")")
	limit := fs.Int("limit", 100, "list at most this many")
	asJSON := fs.Bool("json", false, "print JSON (without payloads: dead show has them)")
	o, done, code, ok := c.openList(fs, args, limit)
	if !ok {
		return code
	}
	defer done()
	evs, err := o.Dead(c.ctx, admin.DeadFilter{Type: *typ, OlderThan: olderThan.d}, *limit)
	if err != nil {
		return c.fail(err)
	}
	return listRows(c, evs, *asJSON, *limit, "no dead events", "", c.printDead)
}

// listRows prints rows as JSON (an empty list for none), or with print, or
// says none when there are none; a full page (limit rows) says --limit shows
// more (of what: "" rows, " groups").
func listRows[T any](c *cli, rows []T, asJSON bool, limit int, none, what string, print func([]T)) int {
	if asJSON {
		if rows == nil {
			rows = []T{}
		}
		c.printJSON(rows)
		return exitOK
	}
	if len(rows) == 0 {
		c.printf("%s\n", none)
		return exitOK
	}
	print(rows)
	if len(rows) == limit {
		c.printf("\n(the first %d%s; --limit shows more)\n", limit, what)
	}
	return exitOK
}

// aggregateCell is an event's aggregate as a table shows it: printable, "-"
// for none.
func aggregateCell(agg string) string {
	if agg = printable(agg); agg == "" {
		return "-"
	}
	return agg
}

// printDead lists evs, one line each.
func (c *cli) printDead(evs []admin.DeadEvent) {
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ID\tTYPE\tAGGREGATE\tATTEMPTS\tSTRIKES\tDIED\tLAST ERROR")
	for _, e := range evs {
		agg := aggregateCell(e.Aggregate())
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", printable(e.ID), printable(e.Type), agg, e.Attempts, e.Strikes,
			e.DeadAt.Format("2006-01-02 15:04:05Z"), printable(clip(100, e.LastError)))
	}
	_ = tw.Flush()
}

func (c *cli) deadShow(args []string) int {
	fs := c.flags("dead show", `dead show [--json] [--table T] ID

Shows one dead event: its envelope, attempts, last error, metadata and payload.`)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := c.parse(fs, args, true)
	if err != nil {
		return c.usageError(err)
	}
	if pos == nil {
		return exitOK
	}
	if len(pos) != 1 {
		return c.usageError(errors.New("give one event id"))
	}
	id, err := parseID(pos[0])
	if err != nil {
		return c.usageError(err)
	}
	o, done, err := c.open(admin.Config{})
	if err != nil {
		return c.fail(err)
	}
	defer done()
	e, err := o.DeadEvent(c.ctx, id)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		c.printJSON(e)
		return exitOK
	}
	agg := printable(e.Aggregate())
	if agg == "" {
		agg = "none"
	}
	c.printf("id:           %s\n", printable(e.ID))
	c.printf("type:         %s (version %d)\n", printable(e.Type), e.Version)
	c.printf("topic:        %s\n", printable(e.Topic))
	c.printf("aggregate:    %s\n", agg)
	c.printf("occurred at:  %s\n", e.OccurredAt.Format(time.RFC3339Nano))
	c.printf("attempts:     %d (%d strikes)\n", e.Attempts, e.Strikes)
	c.printf("died at:      %s\n", e.DeadAt.Format(time.RFC3339Nano))
	c.printf("last error:   %s\n", printableLines(e.LastError, "              "))
	c.printf("metadata:\n%s\n", printableLines(indent(e.Metadata), ""))
	c.printf("payload:\n%s\n", printableLines(indent(e.Payload), ""))
	return exitOK
}

func (c *cli) requeue(args []string) int {
	fs := c.flags("requeue", `requeue [--dry-run] [--table T] ID...
       herald requeue [--dry-run] [--table T] --type T
       herald requeue [--dry-run] [--table T] --all

Makes dead events pending again, due now, with their attempts and strikes
reset; the relays publish them at their next poll (on PostgreSQL they are
woken at once, through --channel). Given ids, it requeues all of them or, when one is not a
dead event, none. Given --type, it fails (exit 1) when no dead event has that
type. A requeued event's age (status, --max-age) counts from its requeue.`)
	typ := fs.String("type", "", "requeue every dead event of this type")
	all := fs.Bool("all", false, "requeue every dead event")
	dryRun := fs.Bool("dry-run", false, "say what would be requeued, and requeue nothing")
	channel := fs.String("channel", relay.DefaultChannel, "PostgreSQL: the LISTEN/NOTIFY channel that wakes the relays (relay.Config.Channel)")
	pos, err := c.parse(fs, args, true)
	if err != nil {
		return c.usageError(err)
	}
	if pos == nil {
		return exitOK
	}
	if _, err := ident.ParseName(*channel); err != nil {
		return c.usageError(fmt.Errorf("--channel: %w", err))
	}
	modes := 0
	for _, on := range []bool{len(pos) > 0, *typ != "", *all} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return c.usageError(errors.New("give event ids, --type T or --all (one of them)"))
	}
	var ids []uuid.UUID
	for _, s := range pos {
		id, err := parseID(s)
		if err != nil {
			return c.usageError(err)
		}
		ids = append(ids, id)
	}
	o, done, err := c.open(admin.Config{Channel: *channel})
	if err != nil {
		return c.fail(err)
	}
	defer done()

	what := ""
	if *typ != "" {
		what = " of type " + *typ
	}
	if *dryRun {
		evs, err := o.Dead(c.ctx, admin.DeadFilter{IDs: ids, Type: *typ}, dryRunLimit)
		if err != nil {
			return c.fail(err)
		}
		if len(ids) > 0 {
			if missing := notFound(ids, evs); len(missing) > 0 {
				return c.fail(fmt.Errorf("%w: %s (nothing would be requeued)", admin.ErrNotDead, strings.Join(missing, ", ")))
			}
		}
		if *typ != "" && len(evs) == 0 {
			return c.fail(fmt.Errorf("no dead events of type %s (nothing would be requeued)", *typ))
		}
		return c.dryRun(evs, "requeue", what)
	}
	var n int64
	switch {
	case len(ids) > 0:
		n, err = o.Requeue(c.ctx, ids...)
	case *typ != "":
		n, err = o.RequeueType(c.ctx, *typ)
	default:
		n, err = o.RequeueAll(c.ctx)
	}
	if err != nil {
		return c.fail(err)
	}
	if *typ != "" && n == 0 {
		// A mistyped type, or one whose events were requeued already: say so,
		// and fail, so that a script notices.
		return c.fail(fmt.Errorf("no dead events of type %s (nothing requeued)", *typ))
	}
	c.printf("requeued %s%s\n", plural(n, "dead event"), what)
	return exitOK
}

// dryRunLimit is how many events a dry run lists.
const dryRunLimit = 1000

// dryRun lists evs, which a verb (requeue, purge) would take, and how many.
func (c *cli) dryRun(evs []admin.DeadEvent, verb, what string) int {
	if len(evs) == 0 {
		c.printf("dry run: no dead events%s to %s\n", what, verb)
		return exitOK
	}
	c.printDead(evs)
	count := plural(int64(len(evs)), "dead event")
	if len(evs) == dryRunLimit {
		count = "at least " + count
	}
	c.printf("\ndry run: would %s %s%s\n", verb, count, what)
	return exitOK
}

// notFound returns the ids not among evs.
func notFound(ids []uuid.UUID, evs []admin.DeadEvent) []string {
	found := map[string]bool{}
	for _, e := range evs {
		found[e.ID] = true
	}
	var out []string
	for _, id := range ids {
		if !found[id.String()] {
			out = append(out, id.String())
			found[id.String()] = true
		}
	}
	return out
}

func (c *cli) purgeDead(args []string) int {
	fs := c.flags("purge-dead", `purge-dead --older-than D [--dry-run] [--table T]

Deletes the dead events that died more than D ago (90m, 36h, 7d, 1d12h; 0 for
every dead event). Pending and published events are never touched.`)
	olderThan := c.durationVar(fs, "older-than", "", "delete the dead events that died more than this long ago ("+durationHint+"; required)")
	dryRun := fs.Bool("dry-run", false, "say what would be deleted, and delete nothing")
	if code, ok := c.parseNone(fs, args); !ok {
		return code
	}
	if !olderThan.set {
		return c.usageError(errors.New("--older-than: required (" + durationHint + ")"))
	}
	age := olderThan.d
	o, done, err := c.open(admin.Config{})
	if err != nil {
		return c.fail(err)
	}
	defer done()
	what := " that died more than " + olderThan.raw + " ago"
	if *dryRun {
		evs, err := o.Dead(c.ctx, admin.DeadFilter{OlderThan: age}, dryRunLimit)
		if err != nil {
			return c.fail(err)
		}
		return c.dryRun(evs, "purge", what)
	}
	n, err := o.PurgeDead(c.ctx, age)
	if err != nil {
		return c.fail(err)
	}
	c.printf("purged %s%s\n", plural(n, "dead event"), what)
	return exitOK
}

// parseID reads an event id.
func parseID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%q is not an event id (a UUID)", s)
	}
	return id, nil
}

// plural returns "1 thing" or "n things".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// clip shortens s to n runes on one line.
func clip(n int, s string) string {
	s = oneLine(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// indent returns JSON indented by two spaces, each line indented too.
func indent(b json.RawMessage) string {
	var buf bytes.Buffer
	if json.Indent(&buf, b, "  ", "  ") != nil {
		return "  " + string(b)
	}
	return "  " + buf.String()
}
