package sqlite

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
	const outage = `UPDATE {t} SET available_at = {now}
WHERE {pending} AND attempts > 0 AND available_at > {now} AND last_failed_at >= ? AND topic = ? AND type = ?`
	return recoveryQueries{all: rep.Replace(outage), fenced: rep.Replace(outage + ` AND ` + fenced)}
}

func (r *relay) RecoverOutage(ctx context.Context, db store.DB, rec store.Recovery) (int64, error) {
	q, more := r.recovery.all, []any(nil)
	if rec.Fence != nil {
		q, more = r.recovery.fenced, fencedArgs(rec.Fence)
	}
	var total int64
	for i := range rec.Topics {
		n, err := sqlkit.Affected(ctx, db, q, append([]any{rec.Since.UnixMicro(), rec.Topics[i], rec.Types[i]}, more...)...)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
