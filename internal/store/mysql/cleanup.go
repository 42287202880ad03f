package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// cleanupSQL is Cleanup's statement: up to a batch of the rows processed
// before the time it is given, the oldest first.
const cleanupSQL = `DELETE FROM {t} WHERE processed_at < {now} - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?`

// Cleanup deletes a batch (DELETE ... LIMIT), at READ COMMITTED: no gap lock
// on the processed index for new events to wait on; concurrent cleaners take
// turns on InnoDB's row locks.
func (r *relay) Cleanup(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	return cleanup(ctx, db, r.cleanup, olderThan, limit)
}

// cleanup runs a cleanup DELETE in a READ COMMITTED transaction of its own and
// returns how many rows it deleted.
func cleanup(ctx context.Context, db *sql.DB, q string, olderThan time.Duration, limit int) (int64, error) {
	var n int64
	err := sqlkit.InTx(ctx, db, readCommitted, func(tx store.Execer) (err error) {
		n, err = sqlkit.Affected(ctx, tx, q, olderThan.Microseconds(), limit)
		return err
	})
	return n, err
}
