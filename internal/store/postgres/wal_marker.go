package postgres

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// The WAL relay's record of its slots: a row per slot, in a table of the
// relay's database, that says the slot was made (or found) and the last
// confirmed position a relay saw it at. A slot is the server's and is not
// replicated (a promoted standby has none, PostgreSQL 15 and 16); a row is,
// with the rest of the database: a slot that is missing while its row is
// there was lost, and the relay must not make it again on its own (the
// events committed after the row's position and before a new slot's start
// would never be published).

// SlotMarkerTable is the name of the table of the slots' rows.
const SlotMarkerTable = "herald_wal_slots"

// SlotMarkers returns the table of the slots' rows beside the outbox table
// t: in its schema (the search path's when t has none).
func SlotMarkers(t ident.Table) ident.Table {
	return ident.Table{Schema: t.Schema, Name: SlotMarkerTable}
}

// SlotMarker is a slot's row.
type SlotMarker struct {
	// StartLSN is where the slot began: its position when it was made (or
	// first found, for a slot made before the row was kept).
	StartLSN string
	// ConfirmedLSN is the last confirmed position of the slot a relay saw
	// when it connected (pg_lsn text, "16/B374D848").
	ConfirmedLSN string
	// CreatedAt is when the row was written, UpdatedAt when ConfirmedLSN
	// was.
	CreatedAt, UpdatedAt time.Time
}

// EnsureSlotMarkers creates the table mt (SlotMarkers) unless it exists: DDL
// once, then nothing (a role without the right to create works once it
// exists).
func EnsureSlotMarkers(ctx context.Context, x store.Execer, mt ident.Table) error {
	ok, err := slotMarkersExist(ctx, x, mt)
	if err != nil || ok {
		return err
	}
	_, err = x.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+mt.Quoted()+` (
    slot_name     text        PRIMARY KEY,
    start_lsn     pg_lsn      NOT NULL,
    confirmed_lsn pg_lsn      NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil && isDuplicateTable(err) { // created meanwhile
		return nil
	}
	return err
}

func slotMarkersExist(ctx context.Context, x store.Execer, mt ident.Table) (bool, error) {
	var ok bool
	err := store.QueryRow(ctx, x, `SELECT to_regclass($1) IS NOT NULL`, []any{mt.Quoted()}, &ok)
	return ok, err
}

// ReadSlotMarker reads the row of slot from mt; found is false when there
// is none, or no table mt.
func ReadSlotMarker(ctx context.Context, x store.Execer, mt ident.Table, slot string) (m SlotMarker, found bool, err error) {
	ok, err := slotMarkersExist(ctx, x, mt)
	if err != nil || !ok {
		return SlotMarker{}, false, err
	}
	err = store.QueryRow(ctx, x, `SELECT start_lsn::text, confirmed_lsn::text, created_at, updated_at FROM `+mt.Quoted()+`
WHERE slot_name = $1`, []any{slot}, &m.StartLSN, &m.ConfirmedLSN, &m.CreatedAt, &m.UpdatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return SlotMarker{}, false, nil
	}
	if err != nil {
		return SlotMarker{}, false, err
	}
	return m, true, nil
}

// MarkSlot records that slot exists, at lsn, unless it is recorded already;
// then moves its confirmed position to lsn when lsn is later. A write when
// the row is made, and one when the position moved: never more.
func MarkSlot(ctx context.Context, x store.Execer, mt ident.Table, slot, lsn string) error {
	res, err := x.ExecContext(ctx, `INSERT INTO `+mt.Quoted()+` (slot_name, start_lsn, confirmed_lsn)
VALUES ($1, $2::pg_lsn, $2::pg_lsn) ON CONFLICT (slot_name) DO NOTHING`, slot, lsn)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	_, err = x.ExecContext(ctx, `UPDATE `+mt.Quoted()+` SET confirmed_lsn = $2::pg_lsn, updated_at = now()
WHERE slot_name = $1 AND confirmed_lsn < $2::pg_lsn`, slot, lsn)
	return err
}

// ResetSlotMarker records slot as made afresh at lsn: what the operator's
// start afresh writes over the row of the slot that was lost.
func ResetSlotMarker(ctx context.Context, x store.Execer, mt ident.Table, slot, lsn string) error {
	_, err := x.ExecContext(ctx, `INSERT INTO `+mt.Quoted()+` (slot_name, start_lsn, confirmed_lsn)
VALUES ($1, $2::pg_lsn, $2::pg_lsn)
ON CONFLICT (slot_name) DO UPDATE SET start_lsn = EXCLUDED.start_lsn, confirmed_lsn = EXCLUDED.confirmed_lsn,
  created_at = now(), updated_at = now()`, slot, lsn)
	return err
}

// DeleteSlotMarker removes the row of slot (a slot dropped on purpose),
// reporting whether there was one; no table mt is no error.
func DeleteSlotMarker(ctx context.Context, x store.Execer, mt ident.Table, slot string) (bool, error) {
	ok, err := slotMarkersExist(ctx, x, mt)
	if err != nil || !ok {
		return false, err
	}
	res, err := x.ExecContext(ctx, `DELETE FROM `+mt.Quoted()+` WHERE slot_name = $1`, slot)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// ReadSlot returns what the server says of the slot name; found is false
// when there is no such slot.
func ReadSlot(ctx context.Context, x store.Execer, name string) (s Slot, found bool, err error) {
	err = store.QueryRow(ctx, x, slotQuery, []any{name}, &s.Plugin, &s.Database, &s.WALStatus, &s.CurrentDatabase,
		&s.ConfirmedLSN, &s.Active)
	if errors.Is(err, sql.ErrNoRows) {
		return Slot{}, false, nil
	}
	if err != nil {
		return Slot{}, false, err
	}
	return s, true, nil
}

const slotQuery = `SELECT coalesce(plugin, ''), coalesce(database, ''), coalesce(wal_status, ''), current_database(),
  coalesce(confirmed_flush_lsn, restart_lsn, '0/0')::text, active
FROM pg_replication_slots WHERE slot_name = $1`

// CreateSlot creates the logical replication slot name with pgoutput and
// returns its start (the position from which it keeps what is committed);
// created is false when another session made it meanwhile.
func CreateSlot(ctx context.Context, x store.Execer, name string) (lsn string, created bool, err error) {
	err = store.QueryRow(ctx, x, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, []any{name}, &lsn)
	if err != nil {
		if isDuplicate(err) {
			return "", false, nil
		}
		return "", false, err
	}
	return lsn, true, nil
}

// isDuplicateTable reports whether err is duplicate_table (42P07) or the
// unique violation (23505) of pg_type that two concurrent CREATE TABLE IF
// NOT EXISTS of one name may raise.
func isDuplicateTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P07" || pgErr.Code == "23505")
}
