package sqlite

import (
	"context"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

func (r *relay) RecoverOutage(ctx context.Context, db store.DB, rec store.Recovery) (int64, error) {
	q, more := r.q.recoverOutage[0], []any(nil)
	if rec.Fence != nil {
		q, more = r.q.recoverOutage[1], []any{rec.Fence.Partitions, sqlkit.FenceJSON(rec.Fence), rec.Fence.Instance}
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
