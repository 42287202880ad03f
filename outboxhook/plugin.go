package outboxhook

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Name is the plugin's name in gorm.Config.Plugins.
const Name = "herald:outbox"

// Plugin is the GORM plugin that writes the events recorded by aggregates to the
// outbox table (or, with StorageWAL, to PostgreSQL's WAL), in the transaction
// of the statement that saves them.
type Plugin struct {
	cfg    Config
	table  ident.Table
	cfgErr error        // what is wrong with cfg (Config.Validate), returned at db.Use
	out    store.Outbox // the outbox table (or the WAL) in the database's implementation
	caps   store.Caps   // what the database can do
	dest   string       // where out writes, for errors: "insert into outbox_messages"

	raw     gorm.ConnPool // the pool wrapped at db.Use
	wrapped *pool         // its wrapper
	stmts   statements    // what the statements prepared through it are
}

// New returns the plugin for cfg; register it with db.Use. The config is checked
// (Config.Validate) and the outbox table created when missing at db.Use, which
// fails if either fails.
func New(cfg Config) *Plugin {
	table, err := cfg.parse()
	return &Plugin{cfg: cfg, table: table, cfgErr: err}
}

// Name returns [Name].
func (p *Plugin) Name() string { return Name }

// Config returns the plugin's configuration, defaults applied.
func (p *Plugin) Config() Config { return p.cfg }

// useWAL makes the plugin write events to the WAL (StorageWAL), once the
// database is known to keep them there.
func (p *Plugin) useWAL(ctx context.Context, conn drivers.Conn) error {
	out, err := conn.Driver.WALOutbox(p.cfg.WALPrefix)
	if err != nil || !p.caps.Has(store.Messages) {
		return fmt.Errorf("%w (database %s)", ErrStorageNotSupported, conn.Driver.Name())
	}
	if err := out.Check(ctx, conn.DB); err != nil {
		return fmt.Errorf("outboxhook: storage wal: %w", err)
	}
	p.out = out
	p.dest = fmt.Sprintf("emit to the WAL (prefix %q)", p.cfg.WALPrefix)
	return nil
}

// Initialize checks the config, creates the outbox table when missing (unless
// Config.DisableAutoCreate, or with StorageWAL, which needs none and checks
// the database's wal_level instead), checks that an existing one has what every
// migration makes (ErrSchemaOutdated names the migration to run) and registers
// the callbacks. GORM calls it from db.Use.
//
// For each of create, update and delete three callbacks are registered:
// herald:outbox_prepare_* runs before the model's Before hooks (it opens a
// transaction when SkipDefaultTransaction left the statement without one, and
// encodes and checks the events before anything is written); herald:outbox_write_*
// runs after the After hooks and before gorm:commit_or_rollback_transaction, and
// inserts the events, and applies the cancels and moves the aggregates
// recorded (aggregate.Root.CancelKey), in the same transaction;
// herald:outbox_finish_* runs after the commit and makes the aggregates forget
// events (and changes) that are now committed.
// herald:outbox_adopt_* runs first in every chain (query, row and raw too): it
// puts the plugin's wrapper on a statement that holds the pool unwrapped (a
// handle made before db.Use, db.Connection's connection), so that the
// transactions begun through it are seen.
func (p *Plugin) Initialize(db *gorm.DB) error {
	if p.cfgErr != nil {
		return p.cfgErr
	}
	conn, err := drivers.Open(db, "") // the table is parsed (New)
	if err != nil {
		return fmt.Errorf("outboxhook: %w", err)
	}
	if err := drivers.Check(db); err != nil {
		return fmt.Errorf("outboxhook: %w", err)
	}
	p.caps = conn.Driver.Caps()
	if p.cfg.Storage == StorageWAL {
		if err := p.useWAL(context.Background(), conn); err != nil {
			return err
		}
	} else {
		p.out = conn.Driver.Outbox(p.table)
		p.dest = "insert into " + p.cfg.Table
		if !p.cfg.DisableAutoCreate {
			if err := p.ensureTable(context.Background(), conn); err != nil {
				return err
			}
		}
		if err := p.checkTable(context.Background(), conn); err != nil {
			return err
		}
	}
	p.wrapPool(db)
	cb := db.Callback()
	create, update, del := cb.Create(), cb.Update(), cb.Delete()
	chains := []struct {
		op            op
		before, after string // the model's Before and After hooks
		get           func(name string) func(*gorm.DB)
		register      func(before, after, name string, fn func(*gorm.DB)) error
	}{
		{opCreate, "gorm:before_create", "gorm:after_create", create.Get,
			func(b, a, n string, fn func(*gorm.DB)) error { return create.Before(b).After(a).Register(n, fn) }},
		{opUpdate, "gorm:before_update", "gorm:after_update", update.Get,
			func(b, a, n string, fn func(*gorm.DB)) error { return update.Before(b).After(a).Register(n, fn) }},
		{opDelete, "gorm:before_delete", "gorm:after_delete", del.Get,
			func(b, a, n string, fn func(*gorm.DB)) error { return del.Before(b).After(a).Register(n, fn) }},
	}
	const commit = "gorm:commit_or_rollback_transaction"
	for _, c := range chains {
		write := "herald:outbox_write_" + c.op.name
		finishAfter := commit
		if c.get(commit) == nil { // SkipDefaultTransaction at gorm.Open: GORM did not register it
			finishAfter = write
		}
		err := errors.Join(
			c.register("*", "", "herald:outbox_adopt_"+c.op.name, p.adopt),
			c.register(c.before, "", "herald:outbox_prepare_"+c.op.name, p.prepare(c.op)),
			c.register(commit, c.after, write, p.write),
			c.register("", finishAfter, "herald:outbox_finish_"+c.op.name, p.finish),
		)
		if err != nil {
			return fmt.Errorf("outboxhook: register %s callbacks: %w", c.op.name, err)
		}
	}
	// The other chains only adopt: a statement run on db.Connection's
	// connection before it begins a transaction wraps the connection (adopt).
	err = errors.Join(
		cb.Query().Before("*").Register("herald:outbox_adopt_query", p.adopt),
		cb.Row().Before("*").Register("herald:outbox_adopt_row", p.adopt),
		cb.Raw().Before("*").Register("herald:outbox_adopt_raw", p.adopt),
	)
	if err != nil {
		return fmt.Errorf("outboxhook: register adopt callbacks: %w", err)
	}
	return nil
}
