package postgres

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

func (r *relay) Dead(ctx context.Context, x store.Execer, limit int) ([]store.Row, error) {
	return sqlkit.Collect(ctx, x, r.q.dead, []any{limit}, scanDead)
}

// Requeue makes a dead event pending again in a statement of its own, then
// forgets the positions: the event keeps its place in the order, and a claim
// that ran before the commit passed over it.
func (r *relay) Requeue(ctx context.Context, db store.DB, id string) (bool, error) {
	ok, err := r.requeue(ctx, db, id)
	if ok {
		r.pos.rewind()
	}
	return ok, err
}

// requeue requeues the dead event id in x's transaction.
func (r *relay) requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	n, err := sqlkit.Affected(ctx, x, r.q.requeue, id)
	return n > 0, err
}

// RequeueAll requeues every dead event, as Requeue does.
func (r *relay) RequeueAll(ctx context.Context, db store.DB) (int64, error) {
	n, err := sqlkit.Affected(ctx, db, r.q.requeueAll)
	if n > 0 {
		r.pos.rewind()
	}
	return n, err
}

// scanDead reads a dead event: the claimed columns, last_error, dead_at.
func scanDead(rows *sql.Rows) (store.Row, error) {
	var (
		lastErr sql.NullString
		deadAt  time.Time
	)
	d, err := scanClaimed(rows, &lastErr, &deadAt)
	d.LastError, d.DeadAt = lastErr.String, deadAt
	return d, err
}
