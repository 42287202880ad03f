package main

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/heraldgo/herald/migrations"
)

func (c *cli) migrate(args []string) int {
	fs := c.flags("migrate", `migrate up|status|print [--db postgres|sqlite|mysql] [--down]

  up      applies the migrations the database of DATABASE_URL has not recorded
          (in herald_schema_migrations), each in a transaction where the
          database allows DDL in one
  status  lists the migrations, applied or not
  print   prints the SQL of a database's migrations (--db, or that of
          DATABASE_URL), for a DBA to apply; --down prints the down files

The migrations are for the default table names (outbox_messages,
inbox_messages): Herald creates tables of other names itself when they are
missing.`)
	dbName := fs.String("db", "", "the database: postgres, sqlite or mysql (print: instead of DATABASE_URL; up, status: must match it)")
	down := fs.Bool("down", false, "print: the down migrations, newest first")
	var sub string
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		c.help()
		return exitOK
	case len(args) == 0 || strings.HasPrefix(args[0], "-"):
		return c.usageError(errors.New("say up, status or print first"))
	}
	sub = args[0]
	c.cmd = "migrate " + sub
	if code, ok := c.parseNone(fs, args[1:]); !ok {
		return code
	}
	if sub != "up" && sub != "status" && sub != "print" {
		c.cmd = "migrate"
		return c.usageError(fmt.Errorf("unknown command %q (up, status or print)", sub))
	}
	if *dbName != "" {
		if !slices.Contains(migrations.Databases(), *dbName) {
			return c.usageError(fmt.Errorf("--db %q: say postgres, sqlite or mysql", *dbName))
		}
	}
	if c.table != migrations.DefaultOutboxTable {
		return c.usageError(fmt.Errorf("--table %s: the migrations are for the default table names (outbox_messages, inbox_messages); "+
			"Herald creates tables of other names itself", c.table))
	}
	if *down && sub != "print" {
		return c.usageError(errors.New("--down is for print"))
	}
	if sub == "print" && *dbName != "" {
		return c.printMigrations(*dbName, *down)
	}

	db, t, err := c.openDB(sub != "up")
	if err != nil {
		if sub == "print" && c.getenv("DATABASE_URL") == "" {
			return c.usageError(errors.New("say --db postgres, sqlite or mysql, or set DATABASE_URL"))
		}
		return c.fail(err)
	}
	defer closeDB(db)
	if *dbName != "" && *dbName != t.dialect {
		return c.usageError(fmt.Errorf("--db %s, but DATABASE_URL is a %s database", *dbName, t.dialect))
	}
	switch sub {
	case "print":
		return c.printMigrations(t.dialect, *down)
	case "up":
		done, err := migrations.Migrate(c.ctx, db)
		if err != nil {
			return c.fail(err)
		}
		if len(done) == 0 {
			c.printf("nothing to apply: every migration is applied\n")
			return exitOK
		}
		fsys, err := migrations.For(db)
		if err != nil {
			return c.fail(err)
		}
		migs, _ := migrations.List(fsys)
		for _, m := range migs {
			if slices.Contains(done, m.Version) {
				c.printf("applied %s\n", m)
			}
		}
		return exitOK
	}
	// status
	states, err := migrations.Status(c.ctx, db)
	if err != nil {
		return c.fail(err)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "VERSION\tNAME\tSTATE")
	pending := 0
	for _, m := range states {
		state := "applied"
		if !m.Applied {
			state, pending = "pending", pending+1
		}
		_, _ = fmt.Fprintf(tw, "%04d\t%s\t%s\n", m.Version, m.Name, state)
	}
	_ = tw.Flush()
	if pending == 0 {
		c.printf("\nevery migration is applied\n")
	} else {
		c.printf("\n%d to apply: herald migrate up\n", pending)
	}
	return exitOK
}

// printMigrations prints the SQL of the database's migrations, each file under
// a comment naming it.
func (c *cli) printMigrations(dialect string, down bool) int {
	fsys, err := migrations.ForDatabase(dialect)
	if err != nil {
		return c.fail(err)
	}
	migs, err := migrations.List(fsys)
	if err != nil {
		return c.fail(err)
	}
	if down {
		slices.Reverse(migs)
	}
	for i, m := range migs {
		file := m.Up
		if down {
			file = m.Down
		}
		b, err := fs.ReadFile(fsys, file)
		if err != nil {
			return c.fail(err)
		}
		if i > 0 {
			c.printf("\n")
		}
		c.printf("-- herald migration %s (%s)\n%s", file, dialect, b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			c.printf("\n")
		}
	}
	return exitOK
}
