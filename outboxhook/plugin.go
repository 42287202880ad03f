package outboxhook

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// Name is the plugin's name in gorm.Config.Plugins.
const Name = "herald:outbox"

// Plugin is the GORM plugin that writes the events recorded by aggregates to the
// outbox table, in the transaction of the statement that saves them.
type Plugin struct {
	cfg    Config
	insert [2][2]string // the INSERTs, by [several events][returning ids]
}

// New returns the plugin for cfg; register it with db.Use. The config is checked
// (Config.Validate) and the outbox table created when missing at db.Use, which
// fails if either fails.
func New(cfg Config) *Plugin {
	cfg.setDefaults()
	return &Plugin{cfg: cfg}
}

// Name returns [Name].
func (p *Plugin) Name() string { return Name }

// Config returns the plugin's configuration, defaults applied.
func (p *Plugin) Config() Config { return p.cfg }

// Initialize checks the config, creates the outbox table when missing (unless
// Config.DisableAutoCreate) and registers the callbacks. GORM calls it from db.Use.
//
// For each of create, update and delete three callbacks are registered:
// herald:outbox_prepare_* runs before the model's Before hooks (it opens a
// transaction when SkipDefaultTransaction left the statement without one, and
// encodes and checks the events before anything is written); herald:outbox_write_*
// runs after the After hooks and before gorm:commit_or_rollback_transaction, and
// inserts the events in the same transaction; herald:outbox_finish_* runs after
// the commit and makes the aggregates forget events that are now committed.
func (p *Plugin) Initialize(db *gorm.DB) error {
	if err := p.cfg.Validate(); err != nil {
		return err
	}
	p.insert = insertSQL(p.cfg.Table)
	if !p.cfg.DisableAutoCreate {
		if err := ensureTable(context.Background(), db, p.cfg.Table); err != nil {
			return err
		}
	}
	cb := db.Callback()
	create, update, del := cb.Create(), cb.Update(), cb.Delete()
	chains := []struct {
		op            string
		before, after string // the model's Before and After hooks
		get           func(name string) func(*gorm.DB)
		register      func(before, after, name string, fn func(*gorm.DB)) error
	}{
		{"create", "gorm:before_create", "gorm:after_create", create.Get,
			func(b, a, n string, fn func(*gorm.DB)) error { return create.Before(b).After(a).Register(n, fn) }},
		{"update", "gorm:before_update", "gorm:after_update", update.Get,
			func(b, a, n string, fn func(*gorm.DB)) error { return update.Before(b).After(a).Register(n, fn) }},
		{"delete", "gorm:before_delete", "gorm:after_delete", del.Get,
			func(b, a, n string, fn func(*gorm.DB)) error { return del.Before(b).After(a).Register(n, fn) }},
	}
	const commit = "gorm:commit_or_rollback_transaction"
	for _, c := range chains {
		write := "herald:outbox_write_" + c.op
		finishAfter := commit
		if c.get(commit) == nil { // SkipDefaultTransaction at gorm.Open: GORM did not register it
			finishAfter = write
		}
		err := errors.Join(
			c.register(c.before, "", "herald:outbox_prepare_"+c.op, p.prepare),
			c.register(commit, c.after, write, p.write),
			c.register("", finishAfter, "herald:outbox_finish_"+c.op, p.finish),
		)
		if err != nil {
			return fmt.Errorf("outboxhook: register %s callbacks: %w", c.op, err)
		}
	}
	return nil
}
