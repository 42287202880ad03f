package walrelay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// ErrSlotMissing is what SlotStatus.Problem returns for a slot that does not
// exist: never set up (Setup, herald wal setup), or dropped.
var ErrSlotMissing = errors.New("walrelay: replication slot does not exist")

// SlotStatus is what the server says of a relay's replication slot: whether
// it exists and is streamed, and how much WAL it holds back.
type SlotStatus struct {
	// Slot is the slot's name.
	Slot string `json:"slot"`
	// Exists is false when there is no such slot; the other figures are
	// then zero.
	Exists bool `json:"exists"`
	// Active is true while a walsender streams the slot (a relay runs);
	// ActivePID is that walsender's process id, 0 otherwise.
	Active    bool  `json:"active"`
	ActivePID int64 `json:"active_pid"`
	// WALStatus is pg_replication_slots.wal_status: "reserved" or
	// "extended" (the WAL the slot needs is kept), "unreserved" (past
	// max_slot_wal_keep_size: it may be removed at the next checkpoint) or
	// "lost" (it was: the slot is invalidated, see Problem).
	WALStatus string `json:"wal_status"`
	// RetainedBytes is the WAL the server keeps for the slot:
	// pg_current_wal_lsn() - restart_lsn. It is what the slot costs on
	// disk, and may stay a little above LagBytes while the relay keeps up
	// (the server frees WAL at checkpoints, by segment).
	RetainedBytes int64 `json:"retained_bytes"`
	// LagBytes is the WAL written since the position the relay last
	// confirmed: pg_current_wal_lsn() - confirmed_flush_lsn. It grows while
	// no relay reads the slot, or while the publisher refuses an event, and
	// falls back near 0 once the relay has published what was written.
	LagBytes int64 `json:"lag_bytes"`
	// AgeSeconds is the time since the relay streaming the slot last
	// reported its confirmed position to the server (it does every
	// Config.StatusInterval, also while an event's publish is retried):
	// now() - pg_stat_replication.reply_time, in seconds. Nil when no relay
	// streams the slot (Active false), or when the session's role may not
	// see the walsender's figures (another role's walsender, without
	// pg_read_all_stats). A relay that is alive keeps it below
	// StatusInterval; LagBytes says whether it keeps up.
	AgeSeconds *float64 `json:"age_seconds"`
	// SafeWALBytes is how much more WAL can be written before the server
	// invalidates the slot (pg_replication_slots.safe_wal_size, set by
	// max_slot_wal_keep_size); nil when there is no such limit.
	SafeWALBytes *int64 `json:"safe_wal_bytes"`
	// Plugin and Database are the slot's output plugin and the database it
	// decodes: pgoutput and the relay's database for a slot Setup made.
	Plugin   string `json:"plugin"`
	Database string `json:"database"`
	// CurrentDatabase is the database of the session that read the status:
	// a slot whose Database differs is another database's (slot names are
	// the server's).
	CurrentDatabase string `json:"current_database"`
}

// Age is AgeSeconds as a duration; ok is false when it is unknown.
func (s SlotStatus) Age() (d time.Duration, ok bool) {
	if s.AgeSeconds == nil {
		return 0, false
	}
	return time.Duration(*s.AgeSeconds * float64(time.Second)), true
}

// Problem says what makes the slot unusable: [ErrSlotMissing] for a slot
// that does not exist, [ErrSlot] (wrapped) for one the server invalidated
// (wal_status lost), made with another plugin than pgoutput, or for another
// database. Nil otherwise; a slot no relay streams, or one far behind, is
// not a problem here (compare LagBytes with a limit of your own).
func (s SlotStatus) Problem() error {
	switch {
	case !s.Exists:
		return fmt.Errorf("%w: %s", ErrSlotMissing, s.Slot)
	case s.WALStatus == "lost":
		return fmt.Errorf("%w: %s was invalidated by the server (wal_status lost, see max_slot_wal_keep_size): "+
			"events written while it fell behind are gone; start afresh with herald wal recreate --slot %s", ErrSlot, s.Slot, s.Slot)
	case s.Plugin != "pgoutput":
		return fmt.Errorf("%w: %s uses plugin %q, not pgoutput", ErrSlot, s.Slot, s.Plugin)
	case s.CurrentDatabase != "" && s.Database != s.CurrentDatabase:
		return fmt.Errorf("%w: %s decodes database %q, not %q", ErrSlot, s.Slot, s.Database, s.CurrentDatabase)
	}
	return nil
}

// ReadSlot reads the status of the replication slot slot from the
// PostgreSQL database db (an ordinary connection: any role may read
// pg_replication_slots). A slot that does not exist is no error: Exists is
// false, and Problem returns [ErrSlotMissing].
func ReadSlot(ctx context.Context, db *sql.DB, slot string) (SlotStatus, error) {
	_, w, err := walDriver()
	if err != nil {
		return SlotStatus{}, err
	}
	return readSlot(ctx, w, db, slot)
}

// readSlot is ReadSlot through w.
func readSlot(ctx context.Context, w store.WAL, x store.Execer, slot string) (SlotStatus, error) {
	s, err := w.SlotStats(ctx, x, slot)
	if err != nil {
		return SlotStatus{}, fmt.Errorf("walrelay: %w", err)
	}
	st := SlotStatus{
		Slot: slot, Exists: s.Exists, Active: s.Active, ActivePID: s.ActivePID, WALStatus: s.WALStatus,
		RetainedBytes: s.RetainedBytes, LagBytes: s.LagBytes, Plugin: s.Plugin, Database: s.Database,
		CurrentDatabase: s.CurrentDatabase,
	}
	if s.ReplyKnown {
		age := s.SinceReply.Seconds()
		st.AgeSeconds = &age
	}
	if s.SafeWALKnown {
		safe := s.SafeWALBytes
		st.SafeWALBytes = &safe
	}
	return st, nil
}

// Stats reads the status of the relay's slot (ReadSlot), on a connection of
// its own to the relay's database.
func (r *Relay) Stats(ctx context.Context) (SlotStatus, error) {
	db, err := openDB(r.dsn)
	if err != nil {
		return SlotStatus{}, fmt.Errorf("walrelay: open: %w", err)
	}
	defer func() { _ = db.Close() }()
	return readSlot(ctx, r.wal, db, r.cfg.Slot)
}
