package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldgo/herald/admin"
)

func (c *cli) status(args []string) int {
	fs := c.flags("status", `status [--json] [--max-age 5m] [--table T]

Shows, per topic and in total, the pending events, those of them that failed
at least once (failing), the dead events, the age of the oldest pending event
and, when a relay Retention keeps published events, how many were published in
the last minute. Exits with 3 when the outbox is unhealthy: dead events, or a
pending event older than --max-age (for cron and health checks).`)
	asJSON := fs.Bool("json", false, "print JSON")
	maxAge := fs.Duration("max-age", 5*time.Minute, "an oldest pending event older than this is unhealthy; 0: never")
	if code, ok := c.parseNone(fs, args); !ok {
		return code
	}
	if *maxAge < 0 {
		return c.usageError(errors.New("--max-age must not be negative"))
	}
	cfg := admin.Config{MaxAge: *maxAge}
	if *maxAge == 0 {
		cfg.MaxAge = -1
	}
	o, done, err := c.open(cfg)
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
	if s.Healthy {
		c.printf("healthy\n")
	} else {
		c.printf("unhealthy: %s\n", printable(strings.Join(s.Problems, "; ")))
	}
}
