package sqlite

import (
	"context"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// fencing returns how the marks of keys are fenced: 2 by the fence, 1 by the
// claim's leases, 0 not at all.
func fencing(leased bool, fence *store.Fence) int {
	switch {
	case fence != nil:
		return 2
	case leased:
		return 1
	}
	return 0
}

// held counts the fence's leases still held: after the fenced marks, in
// their transaction (SQLite's one writer: nothing took one in between).
func (r *relay) held(ctx context.Context, x store.Execer, fence *store.Fence) error {
	var n int
	if err := sqlkit.QueryRow(ctx, x, r.q.fenceHeld, []any{sqlkit.FenceJSON(fence), fence.Instance}, &n); err != nil {
		return err
	}
	return sqlkit.CheckFence(fence, n)
}

// MarkPublished deletes published events, or with keep stamps them
// processed: a key with a Lease only while its row holds that lease; with a
// fence, a row only while its partition's lease is the fence's (else
// ErrLeaseLost, after marking the rows of the partitions still held).
func (r *relay) MarkPublished(ctx context.Context, x store.Execer, keys []sqlkit.Key, keep bool, fence *store.Fence) error {
	if len(keys) == 0 {
		return nil
	}
	q := r.q.markDelete
	if keep {
		q = r.q.markProcessed
	}
	switch f := fencing(keys[0].Lease != 0, fence); f {
	case 1:
		return sqlkit.ExecSeqLeases(ctx, x, q[f], keys)
	case 2:
		seqs, err := sqlkit.SeqsJSON(keys)
		if err != nil {
			return err
		}
		if _, err := x.ExecContext(ctx, q[f], seqs, fence.Partitions, sqlkit.FenceJSON(fence), fence.Instance); err != nil {
			return err
		}
		return r.held(ctx, x, fence)
	default:
		return sqlkit.ExecSeqs(ctx, x, q[f], keys)
	}
}

// MarkFailed records failures, fenced as MarkPublished is, and returns
// the time of the marks. It updates each row: failures are few next to
// publishes.
func (r *relay) MarkFailed(ctx context.Context, x store.Execer, fs []store.Failure, fence *store.Fence) (time.Time, error) {
	now := time.Now().UTC()
	us := now.UnixMicro()
	var fenceJSON string
	if fence != nil {
		fenceJSON = sqlkit.FenceJSON(fence)
	}
	for _, f := range fs {
		strike := 0
		if f.Strike {
			strike = 1
		}
		args := []any{strike, f.Err, us, us, f.Delay.Microseconds(), f.Dead, us, f.ID}
		i := fencing(f.Lease != 0, fence)
		switch i {
		case 1:
			args = append(args, f.Lease)
		case 2:
			args = append(args, fence.Partitions, fenceJSON, fence.Instance)
		}
		if _, err := x.ExecContext(ctx, r.q.markFailed[i], args...); err != nil {
			return now, err
		}
	}
	if fence != nil && len(fs) > 0 {
		return now, r.held(ctx, x, fence)
	}
	return now, nil
}
