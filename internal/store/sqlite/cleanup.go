package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Cleanup deletes a batch; SQLite's single writer makes cleaners take turns.
func (r *relay) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return sqlkit.Affected(ctx, db, r.q.cleanup, olderThan.Microseconds(), limit)
}
