package mysql

import (
	"context"
	"errors"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// MarkPublished deletes published events, or with keep stamps them
// processed; with a fence, a row only while its partition's lease is the
// fence's (else ErrLeaseLost, after marking the rows of the partitions still
// held).
func (r *relay) MarkPublished(ctx context.Context, x store.Execer, keys []sqlkit.Key, keep bool, fence *store.Fence) error {
	q := r.q.markDelete
	if keep {
		q = r.q.markProcessed
	}
	if fence == nil || len(keys) == 0 {
		return sqlkit.ExecSeqs(ctx, x, q[0], keys)
	}
	// Every lease held, and share-locked until the marks commit: no
	// take-over can come between, and the plain mark is fenced as it is.
	lost := r.held(ctx, x, fence)
	if lost == nil {
		return sqlkit.ExecSeqs(ctx, x, q[0], keys)
	}
	if !errors.Is(lost, store.ErrLeaseLost) {
		return lost
	}
	seqs, err := sqlkit.SeqsJSON(keys)
	if err != nil {
		return err
	}
	if _, err := x.ExecContext(ctx, q[1], seqs, fence.Partitions, fence.Instance, sqlkit.FenceJSON(fence)); err != nil {
		return err
	}
	return lost
}

// held counts the fence's leases still held, share-locking them until the
// transaction ends (a locking read sees the newest version, at any
// isolation; Acquire skips locked rows), and returns store.ErrLeaseLost when
// some is not.
func (r *relay) held(ctx context.Context, x store.Execer, fence *store.Fence) error {
	var n int
	if err := sqlkit.QueryRow(ctx, x, r.q.fenceHeld, []any{sqlkit.FenceJSON(fence), fence.Instance}, &n); err != nil {
		return err
	}
	return sqlkit.CheckFence(fence, n)
}

// MarkFailed records failures, fenced as MarkPublished is, and returns the
// database's time of the marks. It updates each row: failures are few next to
// publishes.
func (r *relay) MarkFailed(ctx context.Context, x store.Execer, fs []store.Failure, fence *store.Fence) (time.Time, error) {
	// The time read first is at or before the marks' own.
	var raw any
	if err := sqlkit.QueryRow(ctx, x, `SELECT `+Now, nil, &raw); err != nil {
		return time.Time{}, err
	}
	now, err := parseTime(raw)
	if err != nil {
		return now, err
	}
	var (
		fenceJSON string
		lost      error
	)
	if fence != nil && len(fs) > 0 {
		// As MarkPublished: with every lease held and locked, the plain
		// marks are fenced as they are.
		if lost = r.held(ctx, x, fence); lost == nil {
			fence = nil
		} else if !errors.Is(lost, store.ErrLeaseLost) {
			return now, lost
		} else {
			fenceJSON = sqlkit.FenceJSON(fence)
		}
	}
	for _, f := range fs {
		strike := 0
		if f.Strike {
			strike = 1
		}
		q, args := r.q.markFailed[0], []any{strike, f.Err, f.Delay.Microseconds(), f.Dead, f.ID}
		if fence != nil {
			q, args = r.q.markFailed[1], append([]any{fence.Partitions, fence.Instance, fenceJSON}, args...)
		}
		if _, err := x.ExecContext(ctx, q, args...); err != nil {
			return now, err
		}
	}
	return now, lost
}
