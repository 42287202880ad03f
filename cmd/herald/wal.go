package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/walrelay"
)

// The WAL relay's slot: herald wal setup and drop, and what status says of
// it.

func (c *cli) wal(args []string) int {
	fs := c.flags("wal", `wal setup|drop|recreate [--slot S] [--publication P] [--table T]

For events kept in PostgreSQL's WAL (outboxhook StorageWAL), published by
walrelay from a logical replication slot:

  setup  checks the server (wal_level=logical, the role's REPLICATION right)
         and creates the publication and the slot when missing, as the relay
         does when it starts: run it before the first event is written, since
         the slot keeps only what is written after it exists
  drop   drops the slot and the publication, when the WAL relay is retired:
         a slot no relay reads keeps WAL without end, until the server's disk
         fills (or max_slot_wal_keep_size invalidates it). Events not yet
         published are lost with it. A slot a relay streams is not dropped:
         stop the relay first
  recreate
         starts afresh after the slot was lost: the relay stops (ErrSlot)
         rather than make again a slot that existed and is gone (dropped,
         or a failover to a standby, which has no slots) or that the server
         invalidated, since the events committed after its last confirmed
         position would never be published. recreate makes it at the
         current end of the WAL (dropping an invalidated one) and prints the
         last confirmed position known and the new slot's start: events
         committed between them may never have been published. Find them
         first. A slot that exists and is usable is left alone

--table is the outbox table refused events are parked in; the record of
the slots (herald_wal_slots) is kept in its schema.

"herald status --wal-slot S" shows the slot's lag and the WAL it keeps.`)
	slot := fs.String("slot", walrelay.DefaultSlot, "the replication slot (walrelay.Config.Slot)")
	pub := fs.String("publication", walrelay.DefaultPublication, "the publication (walrelay.Config.Publication)")
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		c.help()
		return exitOK
	case len(args) == 0 || strings.HasPrefix(args[0], "-"):
		return c.usageError(errors.New("say setup, drop or recreate first"))
	}
	sub := args[0]
	c.cmd = "wal " + sub
	if code, ok := c.parseNone(fs, args[1:]); !ok {
		return code
	}
	if sub != "setup" && sub != "drop" && sub != "recreate" {
		c.cmd = "wal"
		return c.usageError(fmt.Errorf("unknown command %q (setup, drop or recreate)", sub))
	}
	cfg := walrelay.Config{Slot: *slot, Publication: *pub, Table: c.table}
	if err := cfg.Validate(); err != nil {
		return c.usageError(errors.New(strings.TrimPrefix(err.Error(), "walrelay: invalid config: ")))
	}
	t, err := parseURL(c.getenv("DATABASE_URL"))
	if err != nil {
		return c.fail(err)
	}
	if !t.wal() {
		return c.fail(fmt.Errorf("the WAL relay needs PostgreSQL; DATABASE_URL is a %s database", t.dialect))
	}
	if sub == "setup" {
		if err := walrelay.Setup(c.ctx, t.dsn, cfg); err != nil {
			return c.fail(errors.New(strings.TrimPrefix(err.Error(), "walrelay: ")))
		}
		c.printf("slot %s and publication %s are ready on %s\n", cfg.Slot, cfg.Publication, t.where)
		return exitOK
	}
	if sub == "recreate" {
		return c.walRecreate(t.dsn, t.where, cfg)
	}
	db, err := open(c.ctx, t, true)
	if err != nil {
		return c.fail(err)
	}
	defer closeDB(db)
	sqlDB, err := db.DB()
	if err != nil {
		return c.fail(err)
	}
	d, err := walrelay.Drop(c.ctx, sqlDB, cfg)
	if err != nil {
		return c.fail(errors.New(strings.TrimPrefix(err.Error(), "walrelay: ")))
	}
	say := func(what, name string, dropped bool) {
		if dropped {
			c.printf("dropped %s %s\n", what, name)
		} else {
			c.printf("no %s %s\n", what, name)
		}
	}
	say("slot", cfg.Slot, d.Slot)
	say("publication", cfg.Publication, d.Publication)
	return exitOK
}

// walRecreate is herald wal recreate: RecreateSlot, and what may be lost.
func (c *cli) walRecreate(dsn, where string, cfg walrelay.Config) int {
	rec, err := walrelay.RecreateSlot(c.ctx, dsn, cfg)
	if err != nil {
		return c.fail(errors.New(strings.TrimPrefix(err.Error(), "walrelay: ")))
	}
	switch {
	case !rec.Created:
		c.printf("slot %s exists on %s and is usable: nothing to recreate\n", cfg.Slot, where)
	case !rec.Lost:
		c.printf("slot %s made on %s, starting at %s (a first slot: nothing was lost)\n", cfg.Slot, where, rec.Start)
	default:
		what := "was gone"
		if rec.Invalidated {
			what = "was invalidated by the server"
		}
		from := rec.LastConfirmed
		if from == "" {
			from = "an unknown position"
		}
		c.printf("slot %s %s; made again on %s, starting at %s\n", cfg.Slot, what, where, rec.Start)
		c.printf("events committed after %s (its last confirmed position known) and before %s may never have been published\n",
			from, rec.Start)
	}
	return exitOK
}

// printWAL prints what status says of the WAL relay's slot.
func (c *cli) printWAL(w *walrelay.SlotStatus) {
	if !w.Exists {
		c.printf("WAL slot %s: missing\n\n", printable(w.Slot))
		return
	}
	state := "no relay streams it"
	if w.Active {
		state = fmt.Sprintf("streamed by process %d", w.ActivePID)
	}
	c.printf("WAL slot %s: %s, wal_status %s\n", printable(w.Slot), state, printable(w.WALStatus))
	c.printf("  lag %s (WAL written since the relay's last confirmed position), retained %s", admin.Bytes(w.LagBytes), admin.Bytes(w.RetainedBytes))
	if age, ok := w.Age(); ok {
		c.printf(", last report %s ago", admin.Age(age))
	}
	if w.SafeWALBytes != nil {
		c.printf(", %s more before the server invalidates it", admin.Bytes(max(*w.SafeWALBytes, 0)))
	}
	c.printf("\n\n")
}

// sizeUnits are the units parseSize reads.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// sizeHint is what the errors of parseSize suggest.
const sizeHint = "512MiB, 1GiB, 2GB, 1048576"

// parseSize reads a size in bytes: a number with an optional unit (B, kB,
// MB, GB, TB in powers of 1000, KiB, MiB, GiB, TiB in powers of 1024), in any
// case. "0" is 0; a negative size is refused.
func parseSize(s string) (int64, error) {
	i := strings.IndexFunc(s, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
	if i < 0 {
		i = len(s)
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	size, ok := sizeUnits[unit]
	v, err := strconv.ParseFloat(num, 64)
	if num == "" || !ok || err != nil {
		return 0, errors.New("not a size (" + sizeHint + ")")
	}
	if v*size >= math.MaxInt64 {
		return 0, errors.New("too large")
	}
	return int64(v * size), nil
}

// sizeFlag is a size flag, read by parseSize.
type sizeFlag struct {
	name   string
	n      int64
	raw    string
	failed error // as durationFlag's
}

// sizeVar defines a size flag with a default (written as a user would,
// "1GiB") on fs, the flag set of the command being parsed.
func (c *cli) sizeVar(fs *flag.FlagSet, name, def, usage string) *sizeFlag {
	f := &sizeFlag{name: name}
	n, err := parseSize(def)
	if err != nil {
		panic("herald: bad default of --" + name + ": " + err.Error())
	}
	f.n, f.raw = n, def
	fs.Var(f, name, usage)
	c.sizes = append(c.sizes, f)
	return f
}

// String is the size as given.
func (f *sizeFlag) String() string { return f.raw }

// Set reads s.
func (f *sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		f.failed = fmt.Errorf("--%s: %q is %w", f.name, s, err)
		return err
	}
	f.n, f.raw, f.failed = n, s, nil
	return nil
}
