package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

func (r *relay) Stats(ctx context.Context, x store.Execer) (store.Stats, error) {
	var (
		s   store.Stats
		age sql.NullInt64
	)
	rows, err := x.QueryContext(ctx, r.q.stats)
	if err != nil {
		return s, err
	}
	defer func() { _ = rows.Close() }()
	if rows.Next() {
		if err := rows.Scan(&s.Pending, &s.Failing, &age, &s.Dead); err != nil {
			return s, err
		}
	}
	if age.Valid {
		s.OldestPending = time.Duration(age.Int64) * time.Microsecond
	}
	return s, rows.Err()
}
