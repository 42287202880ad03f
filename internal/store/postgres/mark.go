package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// markQueries are the marks' statements, each by [fenced].
type markQueries struct {
	delete, processed, failed [2]string
}

func newMarkQueries(t ident.Table, rep *strings.Replacer) markQueries {
	var q markQueries
	q.delete[0] = rep.Replace(`DELETE FROM {t} WHERE id = ANY($1::uuid[])`)
	q.processed[0] = rep.Replace(`UPDATE {t} SET processed_at = now(), last_error = NULL WHERE id = ANY($1::uuid[])`)
	// statement_timestamp, not now(): in a claim's transaction now() is its
	// start, before publishing, which would shorten the backoffs.
	markFailed := `UPDATE {t} AS o SET
  attempts = o.attempts + 1,
  strikes = o.strikes + CASE WHEN u.strike THEN 1 ELSE 0 END,
  last_error = u.err,
  last_failed_at = statement_timestamp(),
  available_at = statement_timestamp() + u.delay * interval '1 microsecond',
  dead_at = CASE WHEN u.dead THEN statement_timestamp() END
FROM unnest($1::uuid[], $2::text[], $3::bool[], $4::bool[], $5::float8[]) AS u(id, err, strike, dead, delay)
WHERE o.id = u.id AND o.processed_at IS NULL AND o.dead_at IS NULL`
	q.failed[0] = rep.Replace(markFailed)
	// Fenced (ordered mode): only rows whose partition is still leased to
	// this instance under the generation the batch holds (the fence), its
	// lease rows locked FOR SHARE until the marks commit, so that no Acquire
	// takes one between the check and the write (Acquire skips locked rows;
	// one that committed first is seen, its generation bumped). The
	// statement returns how many of the fence's leases it found held.
	fenced := func(first int, mark string) string {
		n := func(i int) string { return fmt.Sprintf("$%d", first+i) }
		part := strings.Replace(partitionExpr, "$2", n(0), 1)
		return rep.Replace(`WITH f AS (SELECT l.partition FROM ` + t.Derived("_leases").Quoted() + ` l
    JOIN unnest(` + n(2) + `::int[], ` + n(3) + `::bigint[]) AS g(part, gen) ON l.partition = g.part AND l.generation = g.gen
  WHERE l.owner = ` + n(1) + ` FOR SHARE OF l),
m AS (` + mark + `
  AND ` + part + ` IN (SELECT partition FROM f) RETURNING 1)
SELECT count(*) FROM f`)
	}
	q.delete[1] = fenced(2, `DELETE FROM {t} o WHERE o.id = ANY($1::uuid[])`)
	q.processed[1] = fenced(2, `UPDATE {t} o SET processed_at = now(), last_error = NULL WHERE o.id = ANY($1::uuid[])`)
	q.failed[1] = fenced(6, markFailed)
	return q
}

// planned makes pgx plan a statement for its arguments each time (an unnamed
// statement) instead of keeping the plan it made first: the marks find their
// rows by id, and a plan made while the outbox was small (a seq scan) stays
// cheap only while it is; a long transaction that keeps the deleted rows
// grows it, and every mark would scan them all.
const planned = pgx.QueryExecModeExec

// MarkPublished deletes published events, or with keep stamps them
// processed; with a fence, a row only while its partition's lease is the
// fence's (else ErrLeaseLost, after marking the rows of the partitions still
// held).
func (r *relay) MarkPublished(ctx context.Context, x store.Execer, keys []sqlkit.Key, keep bool, fence *store.Fence) error {
	ids := sqlkit.IDs(keys)
	q := r.marks.delete
	if keep {
		q = r.marks.processed
	}
	var err error
	if fence == nil {
		_, err = x.ExecContext(ctx, q[0], planned, ids)
	} else {
		err = r.fenced(ctx, x, q[1], fence, ids)
	}
	if err == nil {
		r.pos.published(ids)
	}
	return err
}

// fenced runs the fenced mark q (its arguments args, then the fence's) and
// checks that it found every lease of the fence held.
func (r *relay) fenced(ctx context.Context, x store.Execer, q string, fence *store.Fence, args ...any) error {
	parts, gens := sqlkit.FenceParts(fence)
	var held int
	if err := sqlkit.QueryRow(ctx, x, q, append(append([]any{planned}, args...), fence.Partitions, fence.Instance, parts, gens), &held); err != nil {
		return err
	}
	return sqlkit.CheckFence(fence, held)
}

// MarkFailed records failures, fenced as MarkPublished is, and returns the
// database's time of the marks.
func (r *relay) MarkFailed(ctx context.Context, x store.Execer, fs []store.Failure, fence *store.Fence) (time.Time, error) {
	n := len(fs)
	ids, errs := make([]string, n), make([]string, n)
	strikes, dead, delays := make([]bool, n), make([]bool, n), make([]float64, n)
	for i, f := range fs {
		ids[i], errs[i], strikes[i], dead[i], delays[i] = f.ID, f.Err, f.Strike, f.Dead, float64(f.Delay.Microseconds())
	}
	// The time read first is at or before the marks' own.
	var now time.Time
	local := r.pos.clock() // before the database's now: never later
	if err := sqlkit.QueryRow(ctx, x, `SELECT statement_timestamp()`, nil, &now); err != nil {
		return now, err
	}
	// Lowered before the marks commit: a claim running meanwhile may pass
	// over a row whose retry is soon due.
	r.pos.failed(fs, now, local)
	if fence != nil {
		return now, r.fenced(ctx, x, r.marks.failed[1], fence, ids, errs, strikes, dead, delays)
	}
	_, err := x.ExecContext(ctx, r.marks.failed[0], planned, ids, errs, strikes, dead, delays)
	return now, err
}
