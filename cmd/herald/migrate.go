package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"text/tabwriter"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/migrations"
)

func (c *cli) migrate(args []string) int {
	fs := c.flags("migrate", `migrate up|status|print [--db postgres|sqlite|mysql] [--down]

  up      applies the migrations the database of DATABASE_URL has not recorded
          (in herald_schema_migrations), each in a transaction where the
          database allows DDL in one
  status  lists the migrations: applied (recorded), present (not recorded,
          but everything it makes is there: Herald created its tables
          itself) or pending
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
	pending, present := 0, 0
	for _, m := range states {
		state := "applied"
		if !m.Applied {
			missing, some, err := lacks(c.ctx, db, m.Migration)
			if err != nil {
				return c.fail(err)
			}
			switch {
			case len(missing) == 0:
				state, present = "present (created by Herald, not recorded)", present+1
			case some:
				state, pending = "pending (lacks "+strings.Join(missing, ", ")+")", pending+1
			default:
				state, pending = "pending", pending+1
			}
		}
		_, _ = fmt.Fprintf(tw, "%04d\t%s\t%s\n", m.Version, m.Name, state)
	}
	_ = tw.Flush()
	switch {
	case pending > 0 && present > 0:
		c.printf("\n%d to apply: herald migrate up (Herald created the tables it has needed so far; "+
			"up makes only what is missing, such as what a relay in another mode uses, and records every migration)\n", pending)
	case pending > 0:
		c.printf("\n%d to apply: herald migrate up\n", pending)
	case present > 0:
		c.printf("\nup to date: Herald created its tables itself, with everything every migration makes; "+
			"%s does not record that (herald migrate up records it and changes nothing)\n", migrations.VersionTable)
	default:
		c.printf("\nevery migration is applied\n")
	}
	return exitOK
}

// lacks looks up in db what the up file of migration m makes (its tables,
// indexes and columns, and the rows of a step that has a check), as Migrate
// and Herald's own creation do before they make it: missing names what is
// not there, some reports that part of it is. A migration that is not
// recorded in herald_schema_migrations but has everything is one Herald
// applied itself, when it created its tables (it records nothing): status
// must not call it pending.
func lacks(ctx context.Context, db *gorm.DB, m migrations.Migration) (missing []string, some bool, err error) {
	conn, err := drivers.Open(db, "")
	if err != nil {
		return nil, false, err
	}
	fsys := conn.Driver.Migrations()
	objs, err := migrate.Objects(fsys, m.Up, "", ident.Table{}, conn.Driver.Quote)
	if err != nil {
		return nil, false, fmt.Errorf("migration %s: %w", m, err)
	}
	dropped, err := migrate.DroppedAfter(fsys, m.Up)
	if err != nil {
		return nil, false, err
	}
	for _, o := range objs {
		if o.Kind == store.KindIndex && dropped[o.Name] {
			continue // a later migration replaced it
		}
		if o.Kind == store.KindStep && len(o.Drops) > 0 { // an index dropped alone: done where its table is without it
			gone, err := dropDone(ctx, conn.Driver, conn.DB, o)
			if err != nil {
				return nil, false, fmt.Errorf("migration %s: look up index %s: %w", m, o.Drops[0], err)
			}
			if gone {
				some = true
			} else {
				missing = append(missing, "the drop of index "+o.Drops[0].String())
			}
			continue
		}
		if o.Kind == store.KindStep && o.Check == "" {
			continue // runs in Migrate unconditionally; nothing to look up
		}
		ok, err := conn.Driver.ObjectExists(ctx, conn.DB, o)
		if err != nil && o.Kind == store.KindStep {
			// A step's check reads its table: no table, no rows (not an error).
			if there, e := conn.Driver.ObjectExists(ctx, conn.DB, store.Object{Kind: store.KindTable, Name: o.Name}); e == nil && !there {
				ok, err = false, nil
			}
		}
		if err != nil {
			return nil, false, fmt.Errorf("migration %s: look up %s: %w", m, describe(o), err)
		}
		if ok {
			some = true
		} else {
			missing = append(missing, describe(o))
		}
	}
	return missing, some, nil
}

// dropDone reports whether the drop step o is done: its table is there
// without the indexes it drops.
func dropDone(ctx context.Context, d store.Driver, x store.Execer, o store.Object) (bool, error) {
	there, err := d.ObjectExists(ctx, x, store.Object{Kind: store.KindTable, Name: o.On})
	if err != nil || !there {
		return false, err
	}
	for _, ix := range o.Drops {
		left, err := d.ObjectExists(ctx, x, store.Object{Kind: store.KindIndex, Name: ix, On: o.On})
		if err != nil || left {
			return false, err
		}
	}
	return true, nil
}

// describe names what o makes, for status.
func describe(o store.Object) string {
	switch o.Kind {
	case store.KindIndex:
		return "index " + o.Name.String()
	case store.KindColumn:
		return "column " + o.Name.String() + "." + o.Column
	case store.KindStep:
		return "the rows of " + o.Name.String()
	}
	return "table " + o.Name.String()
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
