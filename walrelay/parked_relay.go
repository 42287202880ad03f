package walrelay

import (
	"context"
	"fmt"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/relay"
)

// The table relay of Config.Parked, which the relay runs itself while it
// streams the slot: it retries and dead-letters the events parked in
// Config.Table, with the relay as its Confirmer.

// A table relay takes a WAL relay as its Config.Confirmer.
var _ relay.Confirmer = (*Relay)(nil)

// parkedConns bounds the parked relay's pool (Config.Parked).
const parkedConns = 4

// runParked runs the table relay of Config.Parked over Config.Table, with
// this relay as its Confirmer, until ctx is done (the stream ended),
// starting it again after Config.RetryInterval should it stop on an error.
func (r *Relay) runParked(ctx context.Context) {
	cfg := *r.cfg.Parked
	cfg.Confirmer = r
	for {
		err := r.parkedOnce(ctx, cfg)
		if ctx.Err() != nil {
			return
		}
		r.log.ErrorContext(ctx, "walrelay: the relay of the parked events stopped; starting it again",
			"error", err, "table", r.table.String(), "retry_in", r.cfg.RetryInterval)
		if !outbound.Sleep(ctx, r.cfg.RetryInterval) {
			return
		}
	}
}

// parkedOnce opens the parked relay's pool and runs it until ctx is done or
// it fails.
func (r *Relay) parkedOnce(ctx context.Context, cfg relay.Config) error {
	sqlDB, err := openDB(r.dsn)
	if err != nil {
		return fmt.Errorf("walrelay: open: %w", err)
	}
	defer func() { _ = sqlDB.Close() }()
	sqlDB.SetMaxOpenConns(parkedConns)
	db, err := gorm.Open(dialector(sqlDB), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fmt.Errorf("walrelay: open: %w", err)
	}
	tr, err := relay.New(db, r.pub, cfg)
	if err != nil {
		return fmt.Errorf("walrelay: parked relay: %w", err)
	}
	return tr.Run(ctx)
}
