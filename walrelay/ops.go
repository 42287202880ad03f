package walrelay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrSlotActive is returned by Drop for a slot a relay still streams: stop
// the relay first (or end its walsender, pg_terminate_backend(active_pid)).
var ErrSlotActive = errors.New("walrelay: replication slot is in use")

// Setup checks the server and creates the publication and the slot of cfg
// (Config.Slot, Config.Publication) in the database of dsn, as
// (*Relay).Setup does, without a relay: for a deployment step, or the
// herald command's "wal setup", run before the first event is written.
func Setup(ctx context.Context, dsn string, cfg Config) error {
	r, err := newRelay(dsn, cfg)
	if err != nil {
		return err
	}
	return r.Setup(ctx)
}

// Dropped says what Drop removed.
type Dropped struct {
	// Slot and Publication are true for what existed and was dropped.
	Slot, Publication bool
}

// Drop drops the slot and the publication of cfg (Config.Slot,
// Config.Publication) from the PostgreSQL database db, those that exist:
// what to do when the WAL relay is retired, since a slot nobody reads keeps
// WAL without end. Events written in the WAL and not yet published are lost
// with the slot. A slot a relay streams is not dropped ([ErrSlotActive]).
// It also removes the slot's row from SlotMarkerTable (beside Config.Table):
// a slot dropped this way is not a lost one, and a relay set up later makes
// it afresh.
func Drop(ctx context.Context, db *sql.DB, cfg Config) (Dropped, error) {
	table, err := cfg.parse()
	if err != nil {
		return Dropped{}, err
	}
	_, w, err := walDriver()
	if err != nil {
		return Dropped{}, err
	}
	var d Dropped
	s, err := readSlot(ctx, w, db, cfg.Slot)
	if err != nil {
		return d, err
	}
	if s.Active {
		return d, fmt.Errorf("%w: %s is streamed by process %d; stop the relay first", ErrSlotActive, cfg.Slot, s.ActivePID)
	}
	if s.Exists {
		if d.Slot, err = w.DropSlot(ctx, db, cfg.Slot); err != nil {
			return d, fmt.Errorf("walrelay: drop slot %s: %w", cfg.Slot, err)
		}
	}
	if d.Publication, err = w.DropPublication(ctx, db, cfg.Publication); err != nil {
		return d, fmt.Errorf("walrelay: drop publication %s: %w", cfg.Publication, err)
	}
	// Dropped on purpose: a relay set up again later starts afresh.
	if _, err := w.SlotRecords(table).Delete(ctx, db, cfg.Slot); err != nil {
		return d, fmt.Errorf("walrelay: forget slot %s in %s: %w", cfg.Slot, SlotMarkerTable, err)
	}
	return d, nil
}
