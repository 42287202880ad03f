package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// The WAL relay's record of its slots (store.SlotRecords): a row per slot,
// in a table of the relay's database, that says the slot was made (or
// found) and the last confirmed position a relay saw it at. A slot is the
// server's and is not replicated (a promoted standby has none, PostgreSQL 15
// and 16); a row is, with the rest of the database: a slot that is missing
// while its row is there was lost, and the relay must not make it again on
// its own (the events committed after the row's position and before a new
// slot's start would never be published).

// SlotRecords returns the record of the slots in the table
// store.WALSlotsTable beside the outbox table t: in its schema (the search
// path's when t has none).
func (wal) SlotRecords(t ident.Table) store.SlotRecords {
	return slotRecords{t: ident.Table{Schema: t.Schema, Name: store.WALSlotsTable}}
}

type slotRecords struct{ t ident.Table }

// Table is the table of the rows.
func (m slotRecords) Table() ident.Table { return m.t }

// Ensure creates the table unless it exists: DDL once, then nothing (a role
// without the right to create works once it exists).
func (m slotRecords) Ensure(ctx context.Context, x store.Execer) error {
	ok, err := m.exist(ctx, x)
	if err != nil || ok {
		return err
	}
	_, err = x.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+m.t.Quoted()+` (
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

func (m slotRecords) exist(ctx context.Context, x store.Execer) (bool, error) {
	var ok bool
	err := sqlkit.QueryRow(ctx, x, `SELECT to_regclass($1) IS NOT NULL`, []any{m.t.Quoted()}, &ok)
	return ok, err
}

// Read reads the row of slot; found is false when there is none, or no
// table.
func (m slotRecords) Read(ctx context.Context, x store.Execer, slot string) (r store.SlotRecord, found bool, err error) {
	ok, err := m.exist(ctx, x)
	if err != nil || !ok {
		return store.SlotRecord{}, false, err
	}
	var start, confirmed string
	err = sqlkit.QueryRow(ctx, x, `SELECT start_lsn::text, confirmed_lsn::text, created_at, updated_at FROM `+m.t.Quoted()+`
WHERE slot_name = $1`, []any{slot}, &start, &confirmed, &r.CreatedAt, &r.UpdatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return store.SlotRecord{}, false, nil
	}
	if err != nil {
		return store.SlotRecord{}, false, err
	}
	if r.Start, err = parseLSN(start); err == nil {
		r.Confirmed, err = parseLSN(confirmed)
	}
	if err != nil {
		return store.SlotRecord{}, false, err
	}
	return r, true, nil
}

// Mark records that slot exists, at lsn, unless it is recorded already;
// then moves its confirmed position to lsn when lsn is later. A write when
// the row is made, and one when the position moved: never more.
func (m slotRecords) Mark(ctx context.Context, x store.Execer, slot string, lsn store.LSN) error {
	res, err := x.ExecContext(ctx, `INSERT INTO `+m.t.Quoted()+` (slot_name, start_lsn, confirmed_lsn)
VALUES ($1, $2::pg_lsn, $2::pg_lsn) ON CONFLICT (slot_name) DO NOTHING`, slot, lsn.String())
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	_, err = x.ExecContext(ctx, `UPDATE `+m.t.Quoted()+` SET confirmed_lsn = $2::pg_lsn, updated_at = now()
WHERE slot_name = $1 AND confirmed_lsn < $2::pg_lsn`, slot, lsn.String())
	return err
}

// Reset records slot as made afresh at lsn: what the operator's start
// afresh writes over the row of the slot that was lost.
func (m slotRecords) Reset(ctx context.Context, x store.Execer, slot string, lsn store.LSN) error {
	_, err := x.ExecContext(ctx, `INSERT INTO `+m.t.Quoted()+` (slot_name, start_lsn, confirmed_lsn)
VALUES ($1, $2::pg_lsn, $2::pg_lsn)
ON CONFLICT (slot_name) DO UPDATE SET start_lsn = EXCLUDED.start_lsn, confirmed_lsn = EXCLUDED.confirmed_lsn,
  created_at = now(), updated_at = now()`, slot, lsn.String())
	return err
}

// Delete removes the row of slot (a slot dropped on purpose), reporting
// whether there was one; no table is no error.
func (m slotRecords) Delete(ctx context.Context, x store.Execer, slot string) (bool, error) {
	ok, err := m.exist(ctx, x)
	if err != nil || !ok {
		return false, err
	}
	res, err := x.ExecContext(ctx, `DELETE FROM `+m.t.Quoted()+` WHERE slot_name = $1`, slot)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// isDuplicateTable reports whether err is duplicate_table (42P07) or the
// unique violation (23505) of pg_type that two concurrent CREATE TABLE IF
// NOT EXISTS of one name may raise.
func isDuplicateTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P07" || pgErr.Code == "23505")
}
