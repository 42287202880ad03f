package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// The WAL relay's slot: what the relay reads of it before it streams, its
// making and removal, and what the people on call see of it (what it holds
// back and whether a relay streams it).

// Slot returns what the server says of the slot name; found is false when
// there is no such slot.
func (wal) Slot(ctx context.Context, x store.Execer, name string) (s store.Slot, found bool, err error) {
	var confirmed string
	err = sqlkit.QueryRow(ctx, x, slotQuery, []any{name}, &s.Plugin, &s.Database, &s.WALStatus, &s.CurrentDatabase,
		&confirmed, &s.Active)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Slot{}, false, nil
	}
	if err != nil {
		return store.Slot{}, false, err
	}
	s.Confirmed, _ = parseLSN(confirmed) // the server's pg_lsn text
	return s, true, nil
}

const slotQuery = `SELECT coalesce(plugin, ''), coalesce(database, ''), coalesce(wal_status, ''), current_database(),
  coalesce(confirmed_flush_lsn, restart_lsn, '0/0')::text, active
FROM pg_replication_slots WHERE slot_name = $1`

// CreateSlot creates the logical replication slot name with pgoutput and
// returns its start (the position from which it keeps what is committed);
// created is false when another session made it meanwhile.
func (wal) CreateSlot(ctx context.Context, x store.Execer, name string) (start store.LSN, created bool, err error) {
	var lsn string
	err = sqlkit.QueryRow(ctx, x, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, []any{name}, &lsn)
	if err != nil {
		if isDuplicate(err) {
			return 0, false, nil
		}
		return 0, false, err
	}
	if start, err = parseLSN(lsn); err != nil {
		return 0, true, err
	}
	return start, true, nil
}

// DropSlot drops the replication slot name, unless it does not exist
// (dropped reports whether it did). A slot a walsender streams cannot be
// dropped: the server's error says so.
func (wal) DropSlot(ctx context.Context, x store.Execer, name string) (dropped bool, err error) {
	found, err := sqlkit.Found(ctx, x, `SELECT 1 FROM pg_replication_slots WHERE slot_name = $1`, name)
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

// SlotActive reports whether err is the server's refusal to stream a slot
// another session streams (object_in_use, 55006: "replication slot ... is
// active for PID ...").
func (wal) SlotActive(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006"
}

// SlotStats reads what pg_replication_slots (and, while a walsender streams
// the slot, pg_stat_replication) say of the slot name: RetainedBytes is
// pg_current_wal_lsn() - restart_lsn, LagBytes pg_current_wal_lsn() -
// confirmed_flush_lsn, SinceReply now() - pg_stat_replication.reply_time,
// SafeWALBytes pg_replication_slots.safe_wal_size (max_slot_wal_keep_size).
// A slot that does not exist is not an error: Exists is false.
func (wal) SlotStats(ctx context.Context, x store.Execer, name string) (store.SlotStats, error) {
	var (
		s     store.SlotStats
		since sql.NullFloat64
		safe  sql.NullInt64
	)
	err := sqlkit.QueryRow(ctx, x, slotStats, []any{name}, &s.Plugin, &s.Database, &s.CurrentDatabase,
		&s.Active, &s.ActivePID, &s.WALStatus, &s.RetainedBytes, &s.LagBytes, &since, &safe)
	if errors.Is(err, sql.ErrNoRows) {
		return store.SlotStats{}, nil
	}
	if err != nil {
		return store.SlotStats{}, fmt.Errorf("read slot %s: %w", name, err)
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

const slotStats = `SELECT coalesce(s.plugin, ''), coalesce(s.database, ''), current_database(),
  s.active, coalesce(s.active_pid, 0), coalesce(s.wal_status, ''),
  coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
  coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::bigint,
  extract(epoch FROM now() - r.reply_time)::float8,
  s.safe_wal_size
FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_name = $1`

// isDuplicate reports whether err is duplicate_object (42710), what a
// publication or slot created meanwhile by another session raises.
func isDuplicate(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42710"
}

// isUndefinedObject reports whether err is undefined_object (42704), what
// dropping a slot another session dropped meanwhile raises.
func isUndefinedObject(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}
