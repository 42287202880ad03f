package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// cleanupSQL is Cleanup's statement: up to a batch of the rows processed
// before the time it is given.
const cleanupSQL = `DELETE FROM {t} WHERE seq IN (SELECT seq FROM {t} WHERE processed_at < {now} - ? LIMIT ?)`

// Cleanup deletes a batch; SQLite's single writer makes cleaners take turns.
func (r *relay) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return sqlkit.Affected(ctx, db, r.cleanup, olderThan.Microseconds(), limit)
}
