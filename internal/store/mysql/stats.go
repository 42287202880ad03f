package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

func (r *relay) Stats(ctx context.Context, x store.Execer) (store.Stats, error) {
	var (
		s   store.Stats
		age sql.NullInt64
	)
	if err := sqlkit.QueryRow(ctx, x, r.q.stats, nil, &s.Pending, &s.Failing, &age, &s.Dead); err != nil {
		return s, err
	}
	if age.Valid {
		s.OldestPending = time.Duration(age.Int64) * time.Microsecond
	}
	if err := r.scheduledStats(ctx, x, &s); err != nil {
		return s, err
	}
	return s, nil
}
