package sqlite

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

func (r *relay) Requeue(ctx context.Context, db store.DB, id string) (bool, error) {
	return r.requeue(ctx, db, id)
}

// requeue requeues the dead event id in x's transaction.
func (r *relay) requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	n, err := sqlkit.Affected(ctx, x, r.q.requeue, id)
	return n > 0, err
}

func (r *relay) RequeueAll(ctx context.Context, db store.DB) (int64, error) {
	return sqlkit.Affected(ctx, db, r.q.requeueAll)
}

// scanDead reads a dead event: the claimed columns, last_error, dead_at.
func scanDead(rows *sql.Rows) (store.Row, error) {
	var (
		d                 store.Row
		payload, metadata string
		occurred, deadAt  int64
		lastErr           sql.NullString
	)
	if err := rows.Scan(&d.ID, &d.Type, &d.Version, &d.AggregateType, &d.AggregateID, &d.Topic, &payload, &metadata,
		&occurred, &d.Attempts, &d.Strikes, &lastErr, &deadAt); err != nil {
		return d, err
	}
	d.Payload, d.Metadata = []byte(payload), []byte(metadata)
	d.OccurredAt, d.DeadAt, d.LastError = time.UnixMicro(occurred).UTC(), time.UnixMicro(deadAt).UTC(), lastErr.String
	return d, nil
}
