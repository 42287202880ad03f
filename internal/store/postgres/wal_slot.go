package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldgo/herald/internal/store"
)

// The WAL relay's slot, as the people on call see it: what it holds back and
// whether a relay streams it, and its removal.

// SlotStats is what pg_replication_slots (and, while a walsender streams the
// slot, pg_stat_replication) say of a slot.
type SlotStats struct {
	// Exists is false when there is no slot of that name; the other fields
	// are then zero.
	Exists bool
	// Plugin and Database are the slot's output plugin and the database it
	// decodes; CurrentDatabase is the session's.
	Plugin, Database, CurrentDatabase string
	// Active is true while a walsender streams the slot, ActivePID its
	// process id (0 otherwise).
	Active    bool
	ActivePID int64
	// WALStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost.
	WALStatus string
	// RetainedBytes is pg_current_wal_lsn() - restart_lsn: the WAL the
	// server keeps for the slot; 0 when restart_lsn is unknown (lost).
	RetainedBytes int64
	// LagBytes is pg_current_wal_lsn() - confirmed_flush_lsn: the WAL
	// written since the last position the relay confirmed.
	LagBytes int64
	// SinceReply is now() - pg_stat_replication.reply_time of the
	// walsender streaming the slot: the time since the relay last reported
	// its position; ReplyKnown is false when the slot is not streamed, or
	// the session may not see the walsender's figures.
	SinceReply time.Duration
	ReplyKnown bool
	// SafeWALBytes is pg_replication_slots.safe_wal_size: the WAL that can
	// still be written before the slot is invalidated (by
	// max_slot_wal_keep_size); SafeWALKnown is false when there is no limit.
	SafeWALBytes int64
	SafeWALKnown bool
}

const slotStats = `SELECT coalesce(s.plugin, ''), coalesce(s.database, ''), current_database(),
  s.active, coalesce(s.active_pid, 0), coalesce(s.wal_status, ''),
  coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
  coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::bigint,
  extract(epoch FROM now() - r.reply_time)::float8,
  s.safe_wal_size
FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_name = $1`

// ReadSlotStats reads what the server says of the replication slot name.
// A slot that does not exist is not an error: Exists is false.
func ReadSlotStats(ctx context.Context, x store.Execer, name string) (SlotStats, error) {
	var (
		s     SlotStats
		since sql.NullFloat64
		safe  sql.NullInt64
	)
	err := store.QueryRow(ctx, x, slotStats, []any{name}, &s.Plugin, &s.Database, &s.CurrentDatabase,
		&s.Active, &s.ActivePID, &s.WALStatus, &s.RetainedBytes, &s.LagBytes, &since, &safe)
	if errors.Is(err, sql.ErrNoRows) {
		return SlotStats{}, nil
	}
	if err != nil {
		return SlotStats{}, fmt.Errorf("read slot %s: %w", name, err)
	}
	s.Exists = true
	s.RetainedBytes, s.LagBytes = max(s.RetainedBytes, 0), max(s.LagBytes, 0)
	if since.Valid {
		s.SinceReply, s.ReplyKnown = max(time.Duration(since.Float64*float64(time.Second)), 0), true
	}
	if safe.Valid {
		s.SafeWALBytes, s.SafeWALKnown = safe.Int64, true
	}
	return s, nil
}

// DropSlot drops the replication slot name, unless it does not exist
// (dropped reports whether it did). A slot a walsender streams cannot be
// dropped: the server's error says so.
func DropSlot(ctx context.Context, x store.Execer, name string) (dropped bool, err error) {
	found, err := store.Found(ctx, x, `SELECT 1 FROM pg_replication_slots WHERE slot_name = $1`, name)
	if err != nil || !found {
		return false, err
	}
	if _, err := x.ExecContext(ctx, `SELECT pg_drop_replication_slot($1)`, name); err != nil {
		if isUndefinedObject(err) { // dropped meanwhile
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// DropPublication drops the publication name, unless it does not exist
// (dropped reports whether it did). name must be a plain lowercase
// identifier.
func DropPublication(ctx context.Context, x store.Execer, name string) (dropped bool, err error) {
	found, err := store.Found(ctx, x, `SELECT 1 FROM pg_publication WHERE pubname = $1`, name)
	if err != nil || !found {
		return false, err
	}
	if _, err := x.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+name); err != nil {
		return false, err
	}
	return true, nil
}

// isUndefinedObject reports whether err is undefined_object (42704), what
// dropping a slot another session dropped meanwhile raises.
func isUndefinedObject(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}
