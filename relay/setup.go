package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/heraldgo/herald/internal/store"
)

// ErrSchemaOutdated is returned (wrapped) by Setup and Run when the outbox or
// the relay's tables exist but lack a column, table or row that a migration
// makes (tables made by an earlier release); the message names the migration
// to run (migrations.Migrate applies it). It is outboxhook.ErrSchemaOutdated.
var ErrSchemaOutdated = store.ErrSchemaOutdated

// ensureSchema creates the relay's tables and indexes when missing, retrying
// while the database is down. Without DDL rights they must exist already; an
// index it may not create only makes the relay slower, and is left out. An
// outdated schema (ErrSchemaOutdated) is not retried: it is returned.
func (r *Relay) ensureSchema(ctx context.Context) error {
	skip := func(name string, err error) bool {
		if !r.drv.PermissionDenied(err) {
			return false
		}
		r.log.Warn("relay: cannot create an index (no privilege); continuing without it", "index", name)
		return true
	}
	var outdated error
	retry(ctx, r.log, "create relay schema", func(ctx context.Context) error {
		err := r.setup(ctx, skip)
		if errors.Is(err, ErrSchemaOutdated) {
			outdated = fmt.Errorf("relay: %w", err)
			return nil
		}
		if err != nil && ctx.Err() == nil {
			r.rounded(0, err)
		}
		return err
	})
	return outdated
}

// Setup creates what the relay needs in the database when it is missing: the
// outbox table (partitioned by occurred_at with DropPartitions, on
// PostgreSQL), and the relay's tables (its instance table in either mode) and
// indexes (see Run); with
// DropPartitions also the partitions of the coming ranges. It then checks that
// the tables have what every migration makes (the writers' too), and fails
// with ErrSchemaOutdated, naming the migration to run, when they do not. Run
// does the same but the outbox table, whose absence it waits out, and checks
// only the tables the relay uses; call Setup first
// where the outbox hook would otherwise create the table (at db.Use)
// unpartitioned.
func (r *Relay) Setup(ctx context.Context) error {
	out := r.drv.Outbox(r.table)
	if !r.cfg.DropPartitions {
		if err := out.Create(ctx, r.db); err != nil {
			return fmt.Errorf("relay: create outbox: %w", err)
		}
	}
	if err := r.setup(ctx, nil); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	if err := out.Check(ctx, r.db); err != nil { // the writers' tables too: Setup made them
		return fmt.Errorf("relay: %w", err)
	}
	// The instance table, which an unordered relay's heartbeat otherwise
	// makes at its first beat (an ordered relay's setup made it): a role that
	// may not make it only goes without the heartbeat (see Run).
	if err := r.drv.Heartbeats(r.table).Create(ctx, r.db); err != nil {
		if !r.drv.PermissionDenied(err) {
			return fmt.Errorf("relay: create the instance table: %w", err)
		}
		r.log.Warn("relay: cannot create the instance table (no privilege); continuing without it", "err", err)
	} else {
		r.hbMade.Store(true)
	}
	return nil
}

// setup creates the partitioned outbox (DropPartitions) when missing, the
// relay's objects, checks that the outbox and they have what every migration
// makes (ErrSchemaOutdated), learns whether the outbox is partitioned, and
// creates the partitions ahead.
func (r *Relay) setup(ctx context.Context, skip func(string, error) bool) error {
	canPartition := r.drv.Caps().Has(store.Partitions)
	if r.cfg.DropPartitions && canPartition {
		if err := r.st.CreatePartitioned(ctx, r.db); err != nil {
			return fmt.Errorf("create partitioned outbox: %w", err)
		}
	}
	// Created and checked through one read of the catalog, where nothing
	// was missing: a fleet makes this start once per tenant.
	if err := r.st.Create(ctx, r.db, store.RelayCreateParams{Ordered: r.cfg.Ordered, Retention: r.cfg.Retention > 0, Skip: skip, Check: true}); err != nil {
		return err
	}
	if !r.cfg.DropPartitions {
		return nil
	}
	partitioned := false
	if canPartition {
		p, err := r.st.Partitioned(ctx, r.db)
		if err != nil {
			return fmt.Errorf("look up partitions: %w", err)
		}
		partitioned = p
	}
	r.partitioned.Store(partitioned)
	if !partitioned {
		r.log.Warn("relay: DropPartitions is set but the outbox is not partitioned (or the database cannot partition it); published events are deleted row by row after the retention")
		return nil
	}
	if _, _, err := r.st.MaintainPartitions(ctx, r.db, r.cfg.PartitionInterval, r.cfg.Retention); err != nil {
		r.log.Warn("relay: partitions", "err", err)
	}
	return nil
}
