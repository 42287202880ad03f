package mysql

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// fencing is how a mark makes sure its rows are still the batch's: the index
// of markQueries' arrays.
type fencing int

const (
	unfenced          fencing = iota // the rows alone (an unordered batch's are locked)
	byPartitionLeases                // a row only while its partition's lease is the fence's (fenced)
	fencings                         // how many fencings there are
)

// markQueries are the marks' statements, each by fencing, and the lock of
// the fence's leases still held.
type markQueries struct {
	delete, processed, failed [fencings]string
	fenceHeld                 string
}

// newMarkQueries builds the marks' statements with rep (newRelay's).
func newMarkQueries(rep *strings.Replacer) markQueries {
	var q markQueries
	// In ordered mode the marks are fenced. First fenceHeld share-locks the
	// batch's leases that are still this instance's ($owner) under the
	// generation the batch holds (the fence, [partition, generation] pairs):
	// a locking read, of the newest committed version at REPEATABLE READ and
	// READ COMMITTED alike, held until the marks commit, so no Acquire takes
	// those partitions before. With every lease held the plain marks follow
	// (nothing can change under them); with one lost, the fenced marks join
	// each row to its partition's lease the same way, and change only the
	// rows of the partitions still held.
	q.fenceHeld = rep.Replace(`SELECT COUNT(*) FROM {leases} AS l
JOIN JSON_TABLE(?, '$[*]' COLUMNS (p INT PATH '$[0]', g BIGINT PATH '$[1]')) AS f ON f.p = l.` + "`partition`" + ` AND f.g = l.generation
WHERE l.owner = ? LOCK IN SHARE MODE`)
	for by, join := range [fencings]string{unfenced: ``, byPartitionLeases: fenced} {
		q.delete[by] = rep.Replace(`DELETE o FROM ` + bySeq + join)
		q.processed[by] = rep.Replace(`UPDATE ` + bySeq + join + ` SET o.processed_at = {now}, o.last_error = NULL`)
		// A failure's row by id (its arguments: failedArgs).
		q.failed[by] = rep.Replace(`UPDATE {t} AS o` + join + ` SET
  o.attempts = o.attempts + 1,
  o.strikes = o.strikes + ?,
  o.last_error = ?,
  o.last_failed_at = {now},
  o.available_at = {now} + INTERVAL ? MICROSECOND,
  o.dead_at = CASE WHEN ? THEN {now} END
WHERE o.id = ? AND o.processed_at IS NULL AND o.dead_at IS NULL`)
	}
	return q
}

// failedArgs are the arguments of a failure's mark (markQueries.failed), by
// name; args lists them in the order of its placeholders.
type failedArgs struct {
	fence  []any  // byPartitionLeases: fencedArgs, first (the join); none unfenced
	strike int    // 1 for a strike, else 0
	err    string // last_error
	delay  int64  // microseconds after the mark when the event is due again
	dead   bool
	id     string
}

// args returns a's values in the order of markQueries.failed's placeholders.
func (a failedArgs) args() []any {
	return append(append([]any{}, a.fence...), a.strike, a.err, a.delay, a.dead, a.id)
}

// fencedArgs are the arguments of fenced: the fence's partition count, its
// instance and its leases (sqlkit.FenceJSON).
func fencedArgs(f *store.Fence) []any {
	return []any{f.Partitions, f.Instance, sqlkit.FenceJSON(f)}
}

// MarkPublished deletes published events, or with keep stamps them
// processed; with a fence, a row only while its partition's lease is the
// fence's (else ErrLeaseLost, after marking the rows of the partitions still
// held).
func (r *relay) MarkPublished(ctx context.Context, x store.Execer, keys []sqlkit.Key, keep bool, fence *store.Fence) error {
	q := &r.marks.delete
	if keep {
		q = &r.marks.processed
	}
	if fence == nil || len(keys) == 0 {
		return sqlkit.ExecSeqs(ctx, x, q[unfenced], keys)
	}
	// Every lease held, and share-locked until the marks commit: no
	// take-over can come between, and the plain mark is fenced as it is.
	lost := r.held(ctx, x, fence)
	if lost == nil {
		return sqlkit.ExecSeqs(ctx, x, q[unfenced], keys)
	}
	if !errors.Is(lost, store.ErrLeaseLost) {
		return lost
	}
	seqs, err := sqlkit.SeqsJSON(keys)
	if err != nil {
		return err
	}
	if _, err := x.ExecContext(ctx, q[byPartitionLeases], append([]any{seqs}, fencedArgs(fence)...)...); err != nil {
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
	if err := sqlkit.QueryRow(ctx, x, r.marks.fenceHeld, []any{sqlkit.FenceJSON(fence), fence.Instance}, &n); err != nil {
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
		by      = unfenced
		byFence []any
		lost    error
	)
	if fence != nil && len(fs) > 0 {
		// As MarkPublished: with every lease held and locked, the plain
		// marks are fenced as they are.
		lost = r.held(ctx, x, fence)
		if lost != nil && !errors.Is(lost, store.ErrLeaseLost) {
			return now, lost
		}
		if lost != nil {
			by, byFence = byPartitionLeases, fencedArgs(fence)
		}
	}
	for _, f := range fs {
		a := failedArgs{fence: byFence, err: f.Err, delay: f.Delay.Microseconds(), dead: f.Dead, id: f.ID}
		if f.Strike {
			a.strike = 1
		}
		if _, err := x.ExecContext(ctx, r.marks.failed[by], a.args()...); err != nil {
			return now, err
		}
	}
	return now, lost
}
