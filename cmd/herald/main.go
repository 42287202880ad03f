// Command herald is for the people on call of a service that uses Herald: it
// shows what the outbox holds and what is stuck, requeues and purges dead
// events, lists scheduled events and cancels them or publishes them now, and
// applies or prints the schema migrations, on PostgreSQL, SQLite and
// MySQL/MariaDB.
//
//	go install ./cmd/herald   # from a clone of the repository
//	DATABASE_URL=postgres://... herald status
//
// Once a version is tagged, go install
// github.com/heraldgo/herald/cmd/herald@latest installs it without a clone.
//
// Run "herald help" for the commands, the DATABASE_URLs it reads and its exit
// codes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/outboxhook"
)

// Exit codes.
const (
	exitOK        = 0 // done; status: healthy
	exitFailed    = 1 // failed: database unreachable, table missing, no dead event with that id, a scheduled event too late to change, ...
	exitUsage     = 2 // bad command line: unknown command or flag, malformed argument
	exitUnhealthy = 3 // status: dead events, the oldest pending event older than --max-age, a WAL slot missing, invalidated or past --max-wal-lag
)

// defaultTable is the outbox table --table defaults to.
const defaultTable = outboxhook.DefaultTable

const usage = `herald operates a Herald outbox: what it holds, what is stuck, and what to do about it.

Usage:
  herald [--table T] <command> [flags] [arguments]

Commands:
  status                       pending, failing, dead, oldest pending age, per topic; scheduled events; the WAL slot
  failing                      why pending events fail: grouped by type and last error
  failing --events             the failing events, soonest next attempt first
  dead list                    the dead events, oldest death first
  dead show ID                 one dead event, with its payload and metadata
  dead groups                  the dead events grouped by type and error (numbers, ids, addresses stripped), with keys
  dead requeue --group KEY     make a group's dead events pending again, once (a second run finds none); --dry-run
  dead purge --group KEY       delete a group's dead events; --older-than D keeps the younger ones; --dry-run
  dead audit                   who requeued or purged which group, when, how many
  requeue ID...                make these dead events pending again (all of them or none)
  requeue --type T             make every dead event of type T pending again (exit 1: none)
  requeue --all                make every dead event pending again
  purge-dead --older-than D    delete the dead events that died more than D ago
  scheduled list               the scheduled events not published yet, soonest due first; --overdue
  scheduled cancel ID          cancel a scheduled event not due yet (exit 1: due, published, dead or unknown)
  scheduled publish-now ID     make a scheduled event not due yet due now
  migrate up|status|print      apply, list or print the schema migrations
  wal setup|drop|recreate      create or drop the WAL relay's slot and publication, or make a lost slot again (PostgreSQL)

Every command reads the database from DATABASE_URL:
  postgres://user:pw@host:5432/db?sslmode=disable   (search_path=schema for another schema)
  mysql://user:pw@host:3306/db
  sqlite:///path/to/file.db   or   file:path/to/file.db
and takes --table, the outbox table (default outbox_messages; schema.table).
Durations (--max-age, --older-than) are Go's (90m, 1.5h, 300ms) or days (7d,
1d12h); sizes (--max-wal-lag) are bytes, with a unit or not (512MiB, 1GiB).

Exit codes:
  0  done; status: healthy
  1  failed: database unreachable, table missing, no dead event with that id,
     a scheduled event due, published or dead already, ...
  2  bad command line: unknown command or flag, malformed argument
  3  status: unhealthy (dead events, the oldest pending event older than --max-age,
     or a WAL slot missing, invalidated or lagging past --max-wal-lag)

Run "herald <command> --help" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// cli is one run of the command.
type cli struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	table  string
	cmd    string // "status", "dead list", ... for messages
	help   func() // prints the help of the command being parsed
	// durations and sizes are the duration and size flags of the command
	// being parsed.
	durations []*durationFlag
	sizes     []*sizeFlag
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	c := &cli{ctx: ctx, stdout: stdout, stderr: stderr, getenv: getenv, table: defaultTable}
	fs := c.flags("", "")
	rest, err := c.parse(fs, args, false)
	if err != nil {
		return c.usageError(err)
	}
	if rest == nil {
		return exitOK // --help
	}
	if len(rest) == 0 {
		_, _ = fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, args := rest[0], rest[1:]
	switch cmd {
	case "help":
		_, _ = fmt.Fprint(stdout, usage)
		return exitOK
	case "status":
		return c.status(args)
	case "dead":
		if len(args) == 0 {
			c.cmd = "dead"
			return c.usageError(errors.New("say list, show, groups, requeue, purge or audit"))
		}
		switch args[0] {
		case "list":
			return c.deadList(args[1:])
		case "show":
			return c.deadShow(args[1:])
		case "groups":
			return c.deadGroups(args[1:])
		case "requeue":
			return c.deadGroupAction("requeue", args[1:])
		case "purge":
			return c.deadGroupAction("purge", args[1:])
		case "audit":
			return c.deadAudit(args[1:])
		}
		c.cmd = "dead"
		return c.usageError(fmt.Errorf("unknown command %q (list, show, groups, requeue, purge or audit)", args[0]))
	case "failing":
		return c.failing(args)
	case "scheduled":
		return c.scheduled(args)
	case "requeue":
		return c.requeue(args)
	case "purge-dead":
		return c.purgeDead(args)
	case "migrate":
		return c.migrate(args)
	case "wal":
		return c.wal(args)
	}
	return c.usageError(fmt.Errorf("unknown command %q", cmd))
}

// flags returns a command's flag set, with --table; synopsis says how to
// call it, for --help.
func (c *cli) flags(cmd, synopsis string) *flag.FlagSet {
	c.cmd, c.durations, c.sizes = cmd, nil, nil
	fs := flag.NewFlagSet("herald "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.table, "table", c.table, "the outbox table, optionally schema.table")
	fs.Usage = func() {} // the flag package calls it on any error: help is printed by parse
	c.help = func() {
		if cmd == "" {
			_, _ = fmt.Fprint(c.stdout, usage)
			return
		}
		_, _ = fmt.Fprintf(c.stdout, "Usage: herald %s\n\nFlags:\n", synopsis)
		fs.SetOutput(c.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		_, _ = fmt.Fprint(c.stdout, "\nDATABASE_URL: "+urlHelp+"\n")
	}
	return fs
}

// parse parses args with fs and returns the arguments that are not flags.
// Flags may follow arguments ("requeue ID --dry-run") unless interleave is
// false (the command's own flags follow the command name). With --help it
// prints the usage and returns nil, nil.
func (c *cli) parse(fs *flag.FlagSet, args []string, interleave bool) ([]string, error) {
	pos := []string{}
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.help()
			return nil, nil
		}
		if err != nil {
			for _, d := range c.durations {
				if d.failed != nil {
					return nil, d.failed
				}
			}
			for _, s := range c.sizes {
				if s.failed != nil {
					return nil, s.failed
				}
			}
			return nil, err
		}
		consumed := len(args) - fs.NArg()
		rest := fs.Args()
		if len(rest) == 0 || !interleave || (consumed > 0 && args[consumed-1] == "--") {
			if _, err := ident.ParseTable(c.table); err != nil {
				return nil, fmt.Errorf("--table: %w", err)
			}
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// openList parses the flags of a list command (no arguments, a positive
// --limit) and opens the outbox; when ok is false the command returns code.
func (c *cli) openList(fs *flag.FlagSet, args []string, limit *int) (o *admin.Outbox, done func(), code int, ok bool) {
	if code, ok := c.parseNone(fs, args); !ok {
		return nil, nil, code, false
	}
	if *limit <= 0 {
		return nil, nil, c.usageError(errors.New("--limit must be positive")), false
	}
	o, done, err := c.open(admin.Config{})
	if err != nil {
		return nil, nil, c.fail(err), false
	}
	return o, done, exitOK, true
}

// parseNone parses a command that takes flags and no positional argument.
// ok is false when the command is over (help was asked for, or the command
// line is bad), with code the exit code to return.
func (c *cli) parseNone(fs *flag.FlagSet, args []string) (code int, ok bool) {
	pos, err := c.parse(fs, args, true)
	if err != nil {
		return c.usageError(err), false
	}
	if pos == nil {
		return exitOK, false
	}
	if len(pos) > 0 {
		return c.usageError(fmt.Errorf("unexpected argument %q", pos[0])), false
	}
	return exitOK, true
}

// usageError reports a bad command line and returns exitUsage.
func (c *cli) usageError(err error) int {
	help := "herald help"
	if c.cmd != "" && c.cmd != "dead" && c.cmd != "scheduled" {
		help = "herald " + c.cmd + " --help"
	}
	_, _ = fmt.Fprintf(c.stderr, "%s: %s (see %s)\n", c.name(), printable(oneLine(err.Error())), help)
	return exitUsage
}

// fail reports a failure and returns exitFailed.
func (c *cli) fail(err error) int {
	_, _ = fmt.Fprintf(c.stderr, "%s: %s\n", c.name(), printable(oneLine(strings.TrimPrefix(err.Error(), "admin: "))))
	return exitFailed
}

func (c *cli) name() string {
	if c.cmd == "" {
		return "herald"
	}
	return "herald " + c.cmd
}

// open opens the database of DATABASE_URL and the outbox table --table.
func (c *cli) open(cfg admin.Config) (*admin.Outbox, func(), error) {
	t, err := parseURL(c.getenv("DATABASE_URL"))
	if err != nil {
		return nil, nil, err
	}
	db, err := open(c.ctx, t, true)
	if err != nil {
		return nil, nil, err
	}
	return c.openOutbox(db, t, cfg)
}

// openOutbox opens the outbox table --table of db, which it closes when it
// fails, and otherwise when done is called.
func (c *cli) openOutbox(db *gorm.DB, t target, cfg admin.Config) (o *admin.Outbox, done func(), err error) {
	cfg.Table = c.table
	o, err = admin.Open(c.ctx, db, cfg)
	if err != nil {
		closeDB(db)
		if errors.Is(err, admin.ErrTableMissing) {
			hint := "--table names another"
			if t.wal() {
				hint += "; events kept in the WAL: --wal-slot"
			}
			return nil, nil, fmt.Errorf("no table %s in the %s database at %s (%s)", c.table, t.dialect, t.where, hint)
		}
		return nil, nil, err
	}
	return o, func() { closeDB(db) }, nil
}

// openDB opens the database of DATABASE_URL; with mustExist an SQLite file
// must exist.
func (c *cli) openDB(mustExist bool) (*gorm.DB, target, error) {
	t, err := parseURL(c.getenv("DATABASE_URL"))
	if err != nil {
		return nil, t, err
	}
	db, err := open(c.ctx, t, mustExist)
	return db, t, err
}

// printJSON writes v, indented, with <, > and & as they are (not \u003c:
// a person reads it; it is not embedded in HTML).
func (c *cli) printJSON(v any) {
	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (c *cli) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(c.stdout, format, args...)
}
