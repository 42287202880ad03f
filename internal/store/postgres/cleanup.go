package postgres

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/ident"
)

// Cleanup deletes a batch under a transaction-scoped advisory lock keyed by the
// table's oid: one instance cleans at a time, tables of one name in other
// schemas clean apart.
func (r *relay) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return lockedDelete(ctx, db, "herald.cleanup:", r.t, r.q().cleanup, float64(olderThan.Milliseconds()), limit)
}

// lockedDelete runs del in a transaction holding the advisory lock of (key,
// table), unless another holds it, and returns how many rows it deleted.
func lockedDelete(ctx context.Context, db *sql.DB, key string, t ident.Table, del string, args ...any) (int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	var locked bool
	if err := tx.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock(hashtext($1 || $2::regclass::oid::text))`,
		key, t.Quoted()).Scan(&locked); err != nil {
		return 0, err
	}
	if !locked {
		return 0, nil
	}
	res, err := tx.ExecContext(ctx, del, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, tx.Commit()
}
