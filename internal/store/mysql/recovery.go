package mysql

import (
	"context"
	"strings"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// recoveryQueries are RecoverOutage's statements: over every partition, or
// fenced by the partition leases of the recovery's fence.
type recoveryQueries struct {
	all, fenced string
}

// newRecoveryQueries builds RecoverOutage's statements with rep (newRelay's).
func newRecoveryQueries(rep *strings.Replacer) recoveryQueries {
	outage := func(join string) string {
		return rep.Replace(`UPDATE {t} AS o` + join + ` SET o.available_at = {now}
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0 AND o.available_at > {now}
  AND o.last_failed_at >= ? AND o.topic = ? AND o.type = ?`)
	}
	return recoveryQueries{all: outage(``), fenced: outage(fenced)}
}

// RecoverOutage runs at READ COMMITTED, whatever the session's default: at
// REPEATABLE READ its range UPDATE takes next-key locks, and while it waits
// for a row another batch holds (marked failed, not yet committed), the gap
// before that row, where new events go, stays locked and the application's
// saves wait.
func (r *relay) RecoverOutage(ctx context.Context, db store.DB, rec store.Recovery) (int64, error) {
	q, more := r.recovery.all, []any(nil)
	if f := rec.Fence; f != nil {
		q, more = r.recovery.fenced, fencedArgs(f)
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
