package outboxhook

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/store"
)

// aggregateLockKey is the 64-bit key of the lock that serializes the writers
// of one aggregate's events.
func aggregateLockKey(aggType, aggID string) int64 {
	h := fnv.New64a()
	h.Write([]byte("herald:aggregate:"))
	h.Write([]byte(aggType))
	h.Write([]byte{0})
	h.Write([]byte(aggID))
	return int64(h.Sum64())
}

// lockAggregates takes, in the transaction pool runs, the locks of keys, held
// until it ends: a second transaction writing events of one of these
// aggregates waits for this one to end, so that its events are inserted, and
// numbered, after this one's committed. Per aggregate, insertion order is then
// commit order, which the ordered relay publishes in.
func (p *Plugin) lockAggregates(ctx context.Context, pool gorm.ConnPool, keys []int64) error {
	if len(keys) == 0 {
		return nil
	}
	if err := p.out.LockAggregates(ctx, pool, keys); err != nil {
		if errors.Is(err, store.ErrTableMissing) {
			return fmt.Errorf("%w: lock aggregates: %w", ErrTableMissing, err)
		}
		return fmt.Errorf("outboxhook: lock aggregates: %w", err)
	}
	return nil
}
