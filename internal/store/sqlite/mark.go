package sqlite

import (
	"context"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// fencing is how a mark makes sure its rows are still the batch's: the index
// of markQueries' arrays.
type fencing int

const (
	unfenced          fencing = iota // by seq alone
	byClaimRow                       // only while the batch's claim row exists (byClaim)
	byPartitionLeases                // a row only while its partition's lease is the fence's (fenced)
	fencings                         // how many fencings there are
)

// fencingOf returns how the marks of keys are fenced: by the fence when there
// is one, else by the claim row when the keys have one (their Lease).
func fencingOf(claimed bool, fence *store.Fence) fencing {
	switch {
	case fence != nil:
		return byPartitionLeases
	case claimed:
		return byClaimRow
	}
	return unfenced
}

// markQueries are the marks' statements, each by fencing, and the count of
// the fence's leases still held.
type markQueries struct {
	delete, processed, failed [fencings]string
	fenceHeld                 string
}

// newMarkQueries builds the marks' statements with rep (newRelay's); their
// fences are relay.go's bySeq, byClaim and fenced.
func newMarkQueries(rep *strings.Replacer) markQueries {
	var q markQueries
	q.fenceHeld = rep.Replace(`SELECT count(*) FROM {leases} l JOIN json_each(?) f
  ON l.partition = json_extract(f.value, '$[0]') AND l.generation = json_extract(f.value, '$[1]')
WHERE l.owner = ?`)
	for by, where := range [fencings]string{unfenced: bySeq, byClaimRow: bySeq + ` AND ` + byClaim, byPartitionLeases: bySeq + ` AND ` + fenced} {
		q.delete[by] = rep.Replace(`DELETE FROM {t} WHERE ` + where)
		q.processed[by] = rep.Replace(`UPDATE {t} SET processed_at = {now}, last_error = NULL WHERE ` + where)
	}
	// A failure's row by id (its arguments: failedArgs). Its available_at,
	// which the claim left alone, becomes the retry's time.
	for by, where := range [fencings]string{unfenced: ``, byClaimRow: ` AND ` + byClaim, byPartitionLeases: ` AND ` + fenced} {
		q.failed[by] = rep.Replace(`UPDATE {t} SET
  attempts = attempts + 1,
  strikes = strikes + ?,
  last_error = ?,
  last_failed_at = ?,
  available_at = ? + ?,
  dead_at = CASE WHEN ? THEN ? END
WHERE id = ? AND {pending}` + where)
	}
	return q
}

// failedArgs are the arguments of a failure's mark (markQueries.failed), by
// name; args lists them in the order of its placeholders.
type failedArgs struct {
	strike int    // 1 for a strike, else 0
	err    string // last_error
	at     int64  // the marks' time (unix microseconds): last_failed_at, dead_at if dead
	delay  int64  // microseconds after at when the event is due again
	dead   bool
	id     string
	fence  []any // the fencing's: the claim row's claim, or fencedArgs; none unfenced
}

// args returns a's values in the order of markQueries.failed's placeholders.
func (a failedArgs) args() []any {
	return append([]any{a.strike, a.err, a.at, a.at, a.delay, a.dead, a.at, a.id}, a.fence...)
}

// fencedArgs are the arguments of fenced: the fence's partition count, its
// leases (sqlkit.FenceJSON) and its instance.
func fencedArgs(f *store.Fence) []any {
	return []any{f.Partitions, sqlkit.FenceJSON(f), f.Instance}
}

// held counts the fence's leases still held: after the fenced marks, in
// their transaction (SQLite's one writer: nothing took one in between).
func (r *relay) held(ctx context.Context, x store.Execer, fence *store.Fence) error {
	var n int
	if err := sqlkit.QueryRow(ctx, x, r.marks.fenceHeld, []any{sqlkit.FenceJSON(fence), fence.Instance}, &n); err != nil {
		return err
	}
	return sqlkit.CheckFence(fence, n)
}

// MarkPublished deletes published events, or with keep stamps them
// processed: keys with a Lease (their claim row's claim, the same for all
// the keys of a batch) only while that row exists; with a fence, a row only
// while its partition's lease is the fence's (else ErrLeaseLost, after
// marking the rows of the partitions still held).
func (r *relay) MarkPublished(ctx context.Context, x store.Execer, keys []sqlkit.Key, keep bool, fence *store.Fence) error {
	if len(keys) == 0 {
		return nil
	}
	q := &r.marks.delete
	if keep {
		q = &r.marks.processed
	}
	switch by := fencingOf(keys[0].Lease != 0, fence); by {
	case byClaimRow:
		seqs, err := sqlkit.SeqsJSON(keys)
		if err != nil {
			return err
		}
		_, err = x.ExecContext(ctx, q[by], seqs, keys[0].Lease)
		return err
	case byPartitionLeases:
		seqs, err := sqlkit.SeqsJSON(keys)
		if err != nil {
			return err
		}
		if _, err := x.ExecContext(ctx, q[by], append([]any{seqs}, fencedArgs(fence)...)...); err != nil {
			return err
		}
		return r.held(ctx, x, fence)
	default:
		return sqlkit.ExecSeqs(ctx, x, q[by], keys)
	}
}

// MarkFailed records failures, fenced as MarkPublished is, and returns
// the time of the marks. It updates each row: failures are few next to
// publishes.
func (r *relay) MarkFailed(ctx context.Context, x store.Execer, fs []store.Failure, fence *store.Fence) (time.Time, error) {
	now := time.Now().UTC()
	us := now.UnixMicro()
	var byFence []any
	if fence != nil {
		byFence = fencedArgs(fence)
	}
	for _, f := range fs {
		a := failedArgs{err: f.Err, at: us, delay: f.Delay.Microseconds(), dead: f.Dead, id: f.ID}
		if f.Strike {
			a.strike = 1
		}
		by := fencingOf(f.Lease != 0, fence)
		switch by {
		case byClaimRow:
			a.fence = []any{f.Lease}
		case byPartitionLeases:
			a.fence = byFence
		}
		if _, err := x.ExecContext(ctx, r.marks.failed[by], a.args()...); err != nil {
			return now, err
		}
	}
	if fence != nil && len(fs) > 0 {
		return now, r.held(ctx, x, fence)
	}
	return now, nil
}
