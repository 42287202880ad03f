package mysql

import (
	"context"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// RecoverOutage runs at READ COMMITTED, whatever the session's default: at
// REPEATABLE READ its range UPDATE takes next-key locks, and while it waits
// for a row another batch holds (marked failed, not yet committed), the gap
// before that row, where new events go, stays locked and the application's
// saves wait.
func (r *relay) RecoverOutage(ctx context.Context, db store.DB, rec store.Recovery) (int64, error) {
	q, more := r.q.recoverOutage[0], []any(nil)
	if f := rec.Fence; f != nil {
		q, more = r.q.recoverOutage[1], []any{f.Partitions, f.Instance, sqlkit.FenceJSON(f)}
	}
	var total int64
	for i := range rec.Topics { // a transaction each, as autocommit was: no lock held across pairs
		var n int64
		err := sqlkit.InTx(ctx, db, readCommitted, func(tx store.Execer) (err error) {
			n, err = sqlkit.Affected(ctx, tx, q, append(more, rec.Since.UTC(), rec.Topics[i], rec.Types[i])...)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
