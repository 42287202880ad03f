package postgres

import (
	"context"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// RecoverOutage makes the recovery's retries due; with a fence (ordered
// mode) only in the partitions the fence's leases still hold, by the lease
// table: the other instances keep positions past their own waiting retries,
// and made due by another instance those would let the later events of
// their aggregates be claimed first.
func (r *relay) RecoverOutage(ctx context.Context, db store.DB, rec store.Recovery) (int64, error) {
	if f := rec.Fence; f != nil {
		parts, gens := sqlkit.FenceParts(f)
		return r.recover(ctx, db, r.q().recoverOwned, rec.Since, rec.Topics, rec.Types, f.Partitions, f.Instance, parts, gens)
	}
	return r.recover(ctx, db, r.q().recoverOutage, rec.Since, rec.Topics, rec.Types)
}

func (r *relay) recover(ctx context.Context, x store.Execer, q string, since time.Time, topics, types []string, more ...any) (int64, error) {
	var n int64
	if err := sqlkit.QueryRow(ctx, x, q, append([]any{since, topics, types}, more...), &n); err != nil {
		return 0, err
	}
	if n > 0 {
		// Retries made due long before their time: the next claims start
		// at the head (after an outage; rare).
		r.pos.rewind()
	}
	return n, nil
}
