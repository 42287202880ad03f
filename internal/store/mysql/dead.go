package mysql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

func (r *relay) Dead(ctx context.Context, x store.Execer, limit int) ([]store.Row, error) {
	return sqlkit.Collect(ctx, x, r.q.dead, []any{limit}, scanDead)
}

// Requeue requeues id at READ COMMITTED, passing over rows relays claimed
// instead of waiting for them.
func (r *relay) Requeue(ctx context.Context, db store.DB, id string) (bool, error) {
	var ok bool
	err := sqlkit.InTx(ctx, db, readCommitted, func(tx store.Execer) error {
		var err error
		ok, err = r.requeue(ctx, tx, id)
		return err
	})
	return ok, err
}

// requeue requeues the dead event id in x's transaction.
func (r *relay) requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	var seq int64
	if err := sqlkit.QueryRow(ctx, x, r.q.seqOf, []any{id}, &seq); errors.Is(err, sql.ErrNoRows) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	n, err := sqlkit.Affected(ctx, x, r.q.requeue, seq)
	return n > 0, err
}

// RequeueAll requeues at READ COMMITTED, as Requeue does: the dead rows
// found by a read that locks nothing, then changed by the primary key.
func (r *relay) RequeueAll(ctx context.Context, db store.DB) (int64, error) {
	var n int64
	err := sqlkit.InTx(ctx, db, readCommitted, func(tx store.Execer) error {
		var err error
		seqs, err := sqlkit.Column[int64](ctx, tx, r.q.deadSeqs)
		if err != nil {
			return err
		}
		n, err = bySeqs(ctx, tx, r.q.requeueSeqs, seqs)
		return err
	})
	return n, err
}

// scanDead reads a dead event: the claimed columns, last_error, dead_at.
func scanDead(rows *sql.Rows) (store.Row, error) {
	var (
		lastErr sql.NullString
		deadAt  any
	)
	d, err := scanClaimed(rows, &lastErr, &deadAt)
	if err != nil {
		return d, err
	}
	d.LastError = lastErr.String
	d.DeadAt, err = parseTime(deadAt)
	return d, err
}
