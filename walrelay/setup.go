package walrelay

import (
	"context"
	"fmt"
)

// Setup checks that the server can stream the relay's slot (wal_level,
// [ErrWALLevel]; the REPLICATION right, [ErrReplicationRight]) and creates
// the publication, the slot and the outbox table refused events are parked
// in (Config.Table, unpartitioned) when missing, and records the slot in
// SlotMarkerTable (created when missing). A slot that exists and cannot be
// used is an [ErrSlot]; so is one that existed and is gone (its row in
// SlotMarkerTable, or this Relay set it up or streamed it before): a
// [SlotLostError], unless Config.RecreateLostSlot. Run calls it; call it
// beforehand to create the slot before the first event is written: the
// slot keeps only what is written after it was made.
func (r *Relay) Setup(ctx context.Context) error {
	_, err := r.setup(ctx)
	return err
}

// setup is Setup, reporting the slot it made (ensureSlot).
func (r *Relay) setup(ctx context.Context) (rec Recreated, err error) {
	rec.Slot = r.cfg.Slot
	db, err := openDB(r.dsn)
	if err != nil {
		return rec, fmt.Errorf("walrelay: open: %w", err)
	}
	defer func() { _ = db.Close() }()
	if err := r.wal.CheckLevel(ctx, db); err != nil {
		return rec, fmt.Errorf("walrelay: %w", err)
	}
	ok, err := r.wal.ReplicationRight(ctx, db)
	if err != nil {
		return rec, fmt.Errorf("walrelay: check replication right: %w", err)
	}
	if !ok {
		return rec, ErrReplicationRight
	}
	// Before the slot, which would keep the WAL of its DDL (and the
	// aggregate locks it fills).
	ok, err = r.outbox.Exists(ctx, db)
	if err == nil && !ok {
		err = r.outbox.Create(ctx, db)
	}
	if err == nil {
		err = r.outbox.Check(ctx, db)
	}
	if err != nil {
		return rec, fmt.Errorf("walrelay: outbox table %s: %w", r.table, err)
	}
	if err := r.wal.EnsurePublication(ctx, db, r.cfg.Publication); err != nil {
		return rec, fmt.Errorf("walrelay: create publication %s: %w", r.cfg.Publication, err)
	}
	return r.ensureSlot(ctx, db)
}
