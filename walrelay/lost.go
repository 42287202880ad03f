package walrelay

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// A slot that vanished is never made again on its own: the events committed
// after its last confirmed position and before a new slot's start would be
// in no slot, and never published. The relay knows a slot existed from a
// row it keeps per slot in a small table of the database
// (herald_wal_slots, beside Config.Table: see "Lost slots" in the package
// documentation), and, within one Relay, from having set it up or streamed
// it.

// SlotMarkerTable is the table, in the schema of Config.Table (the search
// path's when it has none), where the relay records each slot it made or
// found, and the slot's last confirmed position seen when a relay
// connected: a row per slot, written when the slot is made (or first found)
// and, when the position moved, when a relay connects; never per event.
const SlotMarkerTable = store.WALSlotsTable

// SlotLostError is the error Setup and Run return, wrapping [ErrSlot], for
// a slot that existed and is gone (dropped by hand, or this server is a
// promoted standby, which has no slots before PostgreSQL 17's failover
// slots), or that the server invalidated: the events committed after
// LastConfirmed may not have been published, and no slot keeps them. The
// relay does not make the slot again: RecreateSlot (herald wal recreate),
// or Config.RecreateLostSlot, starts afresh, accepting that loss.
type SlotLostError struct {
	Slot string
	// Invalidated is true for a slot that exists but that the server
	// invalidated (wal_status lost), false for one that is gone.
	Invalidated bool
	// LastConfirmed is the last position of the slot known to have been
	// confirmed (pg_lsn text, "0/1A2B3C8"): events committed after it may
	// not have been published. "" when unknown.
	LastConfirmed string
	// Seen is when LastConfirmed was recorded (the time of the row in
	// SlotMarkerTable; zero when it was seen by this process).
	Seen time.Time
}

func (e *SlotLostError) Error() string {
	what := fmt.Sprintf("slot %s is gone (dropped, or this server is a promoted standby, which has no slots)", e.Slot)
	if e.Invalidated {
		what = fmt.Sprintf("slot %s was invalidated by the server (wal_status lost, see max_slot_wal_keep_size): the WAL it needed was removed", e.Slot)
	}
	last := "its last confirmed position is unknown"
	if e.LastConfirmed != "" {
		last = "its last confirmed position known is " + e.LastConfirmed
		if !e.Seen.IsZero() {
			last += " (recorded " + e.Seen.UTC().Format(time.RFC3339) + ")"
		}
	}
	after := "since then"
	if e.LastConfirmed != "" {
		after = "after " + e.LastConfirmed
	}
	return fmt.Sprintf("%s: %s; %s; events committed %s and before a new slot's start may never be published. "+
		"The relay does not make the slot again on its own: to start afresh, accepting that loss, run "+
		"\"herald wal recreate --slot %s\" (walrelay.RecreateSlot) or set Config.RecreateLostSlot",
		ErrSlot, what, last, after, e.Slot)
}

// Unwrap returns [ErrSlot].
func (e *SlotLostError) Unwrap() error { return ErrSlot }

// Recreated says what RecreateSlot (or Config.RecreateLostSlot) did.
type Recreated struct {
	Slot string
	// Created is true when a slot was made; false when the slot existed
	// and was usable: nothing was done.
	Created bool
	// Lost is true when the slot made replaces one that existed (it was
	// gone, or invalidated: Invalidated), false for a first slot.
	Lost, Invalidated bool
	// LastConfirmed is the lost slot's last position known to have been
	// confirmed, "" when unknown; Start is the new slot's start. Events
	// committed after LastConfirmed and before Start may never have been
	// published.
	LastConfirmed, Start string
}

// RecreateSlot is the operator's start afresh after a slot was lost (what
// Run refuses with a [SlotLostError]): it makes the slot of cfg again (an
// invalidated one is dropped first, unless a relay streams it:
// [ErrSlotActive]), at the current end of the WAL, as Setup does for a
// first start, and records it as new. It reports the positions between
// which events may have been lost. A slot that exists and is usable is left
// alone (Created false). herald wal recreate runs it.
func RecreateSlot(ctx context.Context, dsn string, cfg Config) (Recreated, error) {
	cfg.RecreateLostSlot = true
	r, err := newRelay(dsn, cfg)
	if err != nil {
		return Recreated{}, err
	}
	return r.setup(ctx)
}

// known is what this Relay knows of its slot: that it set it up or
// streamed it, and the last position it saw confirmed.
func (r *Relay) known() (seen bool, lsn store.LSN) {
	r.slotMu.Lock()
	defer r.slotMu.Unlock()
	return r.slotSeen, r.slotLSN
}

// saw records that the slot exists, confirmed at least at lsn.
func (r *Relay) saw(lsn store.LSN) {
	r.slotMu.Lock()
	defer r.slotMu.Unlock()
	r.slotSeen = true
	r.slotLSN = max(r.slotLSN, lsn)
}

// ensureSlot makes the slot when it never existed, checks it, and records
// it in the table of the slots' rows; a slot that existed and is gone (or
// invalidated) is made again only with Config.RecreateLostSlot, else it
// returns a [SlotLostError]. What it made is reported.
func (r *Relay) ensureSlot(ctx context.Context, x store.Execer) (Recreated, error) {
	slot := r.cfg.Slot
	rec := Recreated{Slot: slot}
	recs := r.wal.SlotRecords(r.table)
	mt := recs.Table()
	if err := recs.Ensure(ctx, x); err != nil {
		return rec, fmt.Errorf("walrelay: create table %s: %w", mt, err)
	}
	// The row before the slot: a row is written after its slot is made,
	// so a row seen here with no slot seen next is a slot that was lost,
	// not one another relay is making.
	m, marked, err := recs.Read(ctx, x, slot)
	if err != nil {
		return rec, fmt.Errorf("walrelay: read %s: %w", mt, err)
	}
	s, found, err := r.wal.Slot(ctx, x, slot)
	if err != nil {
		return rec, fmt.Errorf("walrelay: read slot %s: %w", slot, err)
	}
	seen, seenLSN := r.known()
	lost := &SlotLostError{Slot: slot}
	var last store.LSN // lost.LastConfirmed, once known
	confirmed := func(lsn store.LSN, at time.Time) {
		last, lost.LastConfirmed, lost.Seen = lsn, lsn.String(), at
	}
	if marked {
		confirmed(m.Confirmed, m.UpdatedAt)
	}
	if seenLSN != 0 && (lost.LastConfirmed == "" || seenLSN > last) {
		confirmed(seenLSN, time.Time{})
	}
	if found && s.WALStatus == "lost" {
		lost.Invalidated = true
		if s.Confirmed != 0 && (lost.LastConfirmed == "" || s.Confirmed > last) {
			confirmed(s.Confirmed, time.Time{})
		}
		if !r.cfg.RecreateLostSlot {
			return rec, lost
		}
		if s.Active {
			return rec, fmt.Errorf("%w: %s is streamed by another session; stop it first", ErrSlotActive, slot)
		}
		if _, err := r.wal.DropSlot(ctx, x, slot); err != nil {
			return rec, fmt.Errorf("walrelay: drop the invalidated slot %s: %w", slot, err)
		}
		found = false
	}
	if !found {
		wasLost := marked || seen || lost.Invalidated
		if wasLost && !r.cfg.RecreateLostSlot {
			return rec, lost
		}
		start, created, err := r.wal.CreateSlot(ctx, x, slot)
		if err != nil {
			return rec, fmt.Errorf("walrelay: create slot %s: %w", slot, err)
		}
		if created {
			rec.Created, rec.Start = true, start.String()
			if wasLost {
				rec.Lost, rec.Invalidated, rec.LastConfirmed = true, lost.Invalidated, lost.LastConfirmed
				if err := recs.Reset(ctx, x, slot, start); err != nil {
					return rec, fmt.Errorf("walrelay: record slot %s in %s: %w", slot, mt, err)
				}
				from := rec.LastConfirmed
				if from == "" {
					from = "an unknown position"
				}
				r.log.ErrorContext(ctx, "walrelay: lost slot made again (RecreateLostSlot): events committed after "+
					from+" and before "+rec.Start+" may never be published",
					"last_confirmed", rec.LastConfirmed, "new_start", rec.Start, "invalidated", rec.Invalidated)
			}
		} // else another relay made it meanwhile
		if s, found, err = r.wal.Slot(ctx, x, slot); err != nil {
			return rec, fmt.Errorf("walrelay: read slot %s: %w", slot, err)
		}
		if !found { // dropped again at once
			return rec, lost
		}
	}
	switch {
	case s.Plugin != "pgoutput":
		return rec, fmt.Errorf("%w: %s uses plugin %q, not pgoutput", ErrSlot, slot, s.Plugin)
	case s.Database != s.CurrentDatabase:
		return rec, fmt.Errorf("%w: %s decodes database %q, not %q", ErrSlot, slot, s.Database, s.CurrentDatabase)
	case s.WALStatus == "lost": // invalidated meanwhile
		lost.Invalidated = true
		return rec, lost
	}
	if err := recs.Mark(ctx, x, slot, s.Confirmed); err != nil {
		return rec, fmt.Errorf("walrelay: record slot %s in %s: %w", slot, mt, err)
	}
	r.saw(s.Confirmed)
	return rec, nil
}
