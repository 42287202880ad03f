package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// requeueSet makes a dead event pending again (the admin's requeues).
// created_at is reset too: the oldest pending age (Stats, the admin's Topics)
// counts from the requeue, not from the first insert, or a requeued event
// would make the outbox unhealthy at once. Nothing else reads created_at (the
// partitioned outbox is partitioned by occurred_at, which is kept).
const requeueSet = `dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = ` + Now + `, created_at = ` + Now

// Admin returns the operations the people on call run on the outbox table t.
func (Driver) Admin(t ident.Table) store.Admin { return newAdmin(t) }

type admin struct {
	t   ident.Table
	rel *relay
	q   struct {
		topics, published, retains, findDead, findFailing, failingGroups, deadOfType, deadBefore, purgeSeqs string
		findScheduled, findOverdue                                                                          string
	}
}

func newAdmin(t ident.Table) *admin {
	a := &admin{t: t, rel: newRelay(t)}
	rep := strings.NewReplacer("{since}", pendingSince, "{t}", Quote(t), "{cols}", claimCols, "{set}", requeueSet, "{now}", Now)
	// Unpublished rows only (pending and dead), by topic; the published rows a
	// retention keeps are counted apart, through the processed index. A
	// scheduled event's age counts from its due time, once due, as in Stats
	// (pendingSince).
	a.q.topics = rep.Replace(`SELECT topic,
  SUM(dead_at IS NULL),
  SUM(dead_at IS NULL AND attempts > 0),
  SUM(dead_at IS NOT NULL),
  TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN dead_at IS NULL THEN {since} END), {now})
FROM {t} WHERE processed_at IS NULL GROUP BY topic`)
	a.q.published = rep.Replace(`SELECT topic, COUNT(*) FROM {t} WHERE processed_at >= {now} - INTERVAL 1 MINUTE GROUP BY topic`)
	a.q.retains = rep.Replace(`SELECT EXISTS (SELECT 1 FROM {t} WHERE processed_at IS NOT NULL)`)
	a.q.findDead = rep.Replace(`SELECT {cols}, o.last_error, o.dead_at FROM {t} o WHERE o.dead_at IS NOT NULL {where} ORDER BY o.dead_at, o.seq LIMIT ?`)
	// Failing: pending with a failed attempt. GROUP BY on the TEXT
	// last_error compares its first max_sort_length bytes (1,024 by default).
	a.q.findFailing = rep.Replace(`SELECT {cols}, o.last_error, o.last_failed_at, o.available_at FROM {t} o
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0 {where} ORDER BY o.available_at, o.seq LIMIT ?`)
	a.q.failingGroups = rep.Replace(`SELECT o.type, COALESCE(o.last_error, ''), COUNT(*), MAX(o.attempts), MIN(o.available_at), MAX(o.last_failed_at) FROM {t} o
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0 {where}
GROUP BY o.type, COALESCE(o.last_error, '') ORDER BY COUNT(*) DESC, o.type, COALESCE(o.last_error, '') LIMIT ?`)
	// Scheduled: the pending rows with a due time, through the scheduled
	// index (dead_at, processed_at, due_at; forced, so that the LIMIT reads
	// its first entries in order instead of sorting a scan), whose entries
	// end with the primary key: in (due_at, seq) order.
	scheduled := `SELECT o.id, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.occurred_at, o.attempts, o.last_error,
  o.due_at, o.schedule_key FROM {t} o FORCE INDEX ({schedIdx})
WHERE o.dead_at IS NULL AND o.processed_at IS NULL AND o.due_at IS NOT NULL{due} ORDER BY o.due_at, o.seq LIMIT ?`
	for _, v := range []struct {
		q   *string
		due string
	}{{&a.q.findScheduled, ""}, {&a.q.findOverdue, " AND o.due_at <= {now}"}} {
		*v.q = strings.NewReplacer("{t}", Quote(t), "{due}", v.due, "{schedIdx}", Quote(ident.Table{Name: t.Derived("_scheduled_idx").Name})).Replace(scheduled)
		*v.q = strings.ReplaceAll(*v.q, "{now}", Now)
	}
	// The writes find their rows first, by a read that locks nothing, then
	// change them by the primary key (as the relay's Requeue and marks do,
	// see bySeq): through a secondary index an UPDATE locks index entries a
	// relay's mark may wait for while it waits for the relay's rows. The
	// statement that changes a row checks again that it is in the state the
	// pick saw (dead; for a purge, dead for that long): a requeue (and a new
	// death) committed after the pick leaves the row alone.
	a.q.deadOfType = rep.Replace(`SELECT seq FROM {t} WHERE dead_at IS NOT NULL AND type = ? ORDER BY seq`)
	a.q.deadBefore = rep.Replace(`SELECT seq FROM {t} WHERE dead_at < {now} - INTERVAL ? MICROSECOND ORDER BY dead_at, seq LIMIT ?`)
	a.q.purgeSeqs = rep.Replace(`DELETE o FROM ` + bySeq + ` WHERE o.dead_at < {now} - INTERVAL ? MICROSECOND`)
	return a
}

func (a *admin) Topics(ctx context.Context, x store.Execer) ([]store.TopicStats, error) {
	return sqlkit.ScanTopics(ctx, x, a.q.topics, a.q.published)
}

func (a *admin) RetainsPublished(ctx context.Context, x store.Execer) (bool, error) {
	var ok bool
	err := sqlkit.QueryRow(ctx, x, a.q.retains, nil, &ok)
	return ok, err
}

func (a *admin) FindDead(ctx context.Context, x store.Execer, f store.DeadFilter, limit int) ([]store.Row, error) {
	var (
		where []string
		args  []any
	)
	if len(f.IDs) > 0 {
		where = append(where, "o.id IN ("+sqlkit.Placeholders(len(f.IDs))+")")
		args = append(args, sqlkit.Anys(f.IDs)...)
	}
	if f.Type != "" {
		where = append(where, "o.type = ?")
		args = append(args, f.Type)
	}
	if f.OlderThan > 0 {
		where = append(where, "o.dead_at < "+Now+" - INTERVAL ? MICROSECOND")
		args = append(args, f.OlderThan.Microseconds())
	}
	cond := ""
	if len(where) > 0 {
		cond = "AND " + strings.Join(where, " AND ")
	}
	return sqlkit.Collect(ctx, x, strings.Replace(a.q.findDead, "{where}", cond, 1), append(args, limit), scanDead)
}

// failing returns q (findFailing or failingGroups) for f and limit, and its
// arguments.
func (a *admin) failing(q string, f store.FailingFilter, limit int) (string, []any) {
	cond, args := "", []any{}
	if f.Type != "" {
		cond, args = "AND o.type = ?", append(args, f.Type)
	}
	return strings.Replace(q, "{where}", cond, 1), append(args, limit)
}

func (a *admin) FindFailing(ctx context.Context, x store.Execer, f store.FailingFilter, limit int) ([]store.Row, error) {
	q, args := a.failing(a.q.findFailing, f, limit)
	return sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Row, error) {
		var (
			lastErr        sql.NullString
			failedAt, next any
		)
		r, err := scanClaimed(rows, &lastErr, &failedAt, &next)
		if err != nil {
			return r, err
		}
		r.LastError = lastErr.String
		if r.LastFailedAt, err = parseTime(failedAt); err != nil {
			return r, err
		}
		r.NextAttemptAt, err = parseTime(next)
		return r, err
	})
}

func (a *admin) FailingGroups(ctx context.Context, x store.Execer, f store.FailingFilter, limit int) ([]store.FailureGroup, error) {
	q, args := a.failing(a.q.failingGroups, f, limit)
	return sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.FailureGroup, error) {
		var (
			g              store.FailureGroup
			next, failedAt any
		)
		if err := rows.Scan(&g.Type, &g.LastError, &g.Events, &g.MaxAttempts, &next, &failedAt); err != nil {
			return g, err
		}
		var err error
		if g.NextAttemptAt, err = parseTime(next); err != nil {
			return g, err
		}
		g.LastFailedAt, err = parseTime(failedAt)
		return g, err
	})
}

func (a *admin) FindScheduled(ctx context.Context, x store.Execer, p store.ScheduledParams) ([]store.Row, error) {
	q := a.q.findScheduled
	if p.Overdue {
		q = a.q.findOverdue
	}
	return sqlkit.Collect(ctx, x, q, []any{p.Limit}, func(rows *sql.Rows) (store.Row, error) {
		var (
			r             store.Row
			lastErr       sql.NullString
			occurred, due any
		)
		if err := rows.Scan(&r.ID, &r.Type, &r.Version, &r.AggregateType, &r.AggregateID, &r.Topic, &occurred, &r.Attempts, &lastErr,
			&due, &r.Schedule.Key); err != nil {
			return r, err
		}
		r.LastError = lastErr.String
		var err error
		if r.OccurredAt, err = parseTime(occurred); err != nil {
			return r, err
		}
		r.Schedule.At, err = parseTime(due)
		return r, err
	})
}

func (a *admin) RequeueIDs(ctx context.Context, db store.DB, ids []string) ([]string, error) {
	return sqlkit.RequeueEach(ctx, db, readCommitted, a.rel.requeue, ids)
}

func (a *admin) RequeueType(ctx context.Context, db store.DB, typ string) (int64, error) {
	var n int64
	err := sqlkit.InTx(ctx, db, readCommitted, func(tx store.Execer) error {
		seqs, err := sqlkit.Column[int64](ctx, tx, a.q.deadOfType, typ)
		if err != nil {
			return err
		}
		n, err = bySeqs(ctx, tx, a.rel.requeues.requeueSeqs, seqs)
		return err
	})
	return n, err
}

func (a *admin) RequeueAll(ctx context.Context, db store.DB) (int64, error) {
	return a.rel.requeueAll(ctx, db)
}

func (a *admin) PurgeDead(ctx context.Context, db store.DB, olderThan time.Duration, limit int) (int64, error) {
	var n int64
	err := sqlkit.InTx(ctx, db, readCommitted, func(tx store.Execer) error {
		seqs, err := sqlkit.Column[int64](ctx, tx, a.q.deadBefore, olderThan.Microseconds(), limit)
		if err != nil {
			return err
		}
		n, err = bySeqs(ctx, tx, a.q.purgeSeqs, seqs, olderThan.Microseconds())
		return err
	})
	return n, err
}

// requeueQueries are the relay's requeues (the admin's): the seq of a dead
// event by id and its requeue, the seqs of every dead event and the requeue
// of dead events by seq (bySeqs).
type requeueQueries struct {
	seqOf, requeue, deadSeqs, requeueSeqs string
}

// newRequeueQueries builds the requeues with rep (newRelay's).
func newRequeueQueries(rep *strings.Replacer) requeueQueries {
	var q requeueQueries
	// By the primary key, found first by a read that locks nothing: by the id
	// key the UPDATE locks the id's entry, then waits for the row a relay's
	// claim locked, whose mark then waits for that entry (a deadlock). Only a
	// dead row is found: an UPDATE by the primary key waits for a pending row
	// a relay holds claimed even where it would not change it.
	q.seqOf = rep.Replace(`SELECT seq FROM {t} WHERE id = ? AND dead_at IS NOT NULL`)
	q.requeue = rep.Replace(`UPDATE {t} SET {set}
WHERE seq = ? AND dead_at IS NOT NULL`)
	// Every dead row, found so too: an UPDATE over the dead rows of the
	// queue index (0006_queue_index) reads, to know it is done, the first
	// entry after them, a pending event that a relay's batch may hold locked.
	q.deadSeqs = rep.Replace(`SELECT seq FROM {t} WHERE dead_at IS NOT NULL ORDER BY seq`)
	q.requeueSeqs = rep.Replace(`UPDATE ` + bySeq + ` SET {set} WHERE o.dead_at IS NOT NULL`)
	return q
}

// requeue requeues the dead event id in x's transaction.
func (r *relay) requeue(ctx context.Context, x store.Execer, id string) (bool, error) {
	var seq int64
	if err := sqlkit.QueryRow(ctx, x, r.requeues.seqOf, []any{id}, &seq); errors.Is(err, sql.ErrNoRows) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	n, err := sqlkit.Affected(ctx, x, r.requeues.requeue, seq)
	return n > 0, err
}

// requeueAll makes every dead event pending again at READ COMMITTED,
// passing over rows relays claimed instead of waiting for them: the dead rows
// found by a read that locks nothing, then changed by the primary key.
func (r *relay) requeueAll(ctx context.Context, db store.DB) (int64, error) {
	var n int64
	err := sqlkit.InTx(ctx, db, readCommitted, func(tx store.Execer) error {
		var err error
		seqs, err := sqlkit.Column[int64](ctx, tx, r.requeues.deadSeqs)
		if err != nil {
			return err
		}
		n, err = bySeqs(ctx, tx, r.requeues.requeueSeqs, seqs)
		return err
	})
	return n, err
}

// scanDead reads a dead event: the claimed columns, last_error, dead_at.
func scanDead(rows *sql.Rows) (store.Row, error) {
	var (
		lastErr sql.NullString
		deadAt  any
	)
	d, err := scanClaimed(rows, &lastErr, &deadAt)
	if err != nil {
		return d, err
	}
	d.LastError = lastErr.String
	d.DeadAt, err = parseTime(deadAt)
	return d, err
}

var _ store.DeadGroupAdmin = (*admin)(nil)

// The grouping of dead events (store.DeadGroupAdmin). dead_at travels as
// microseconds since the epoch, exact (DATETIME(6), UTC).
const (
	scanDeadSQL = `SELECT o.seq, o.id, o.type, COALESCE(o.last_error, ''), TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', o.dead_at) FROM {t} o
WHERE o.dead_at IS NOT NULL {where} ORDER BY o.dead_at, o.seq LIMIT ?`
	deadBound = `TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')`
)

func (a *admin) ScanDead(ctx context.Context, x store.Execer, s store.DeadScan) ([]store.DeadBrief, error) {
	var (
		where []string
		args  []any
	)
	if s.Type != "" {
		where, args = append(where, "o.type = ?"), append(args, s.Type)
	}
	if s.UpTo > 0 {
		where, args = append(where, "o.dead_at <= "+deadBound), append(args, s.UpTo)
	}
	if s.OlderThan > 0 {
		where, args = append(where, "o.dead_at < "+Now+" - INTERVAL ? MICROSECOND"), append(args, s.OlderThan.Microseconds())
	}
	if s.AfterDeadAt > 0 {
		where = append(where, "(o.dead_at > "+deadBound+" OR (o.dead_at = "+deadBound+" AND o.seq > ?))")
		args = append(args, s.AfterDeadAt, s.AfterDeadAt, s.AfterSeq)
	}
	cond := ""
	if len(where) > 0 {
		cond = "AND " + strings.Join(where, " AND ")
	}
	q := strings.NewReplacer("{t}", Quote(a.t), "{where}", cond).Replace(scanDeadSQL)
	return sqlkit.ScanDead(ctx, x, q, append(args, s.Limit))
}

// ActDead changes the rows by the primary key (bySeq), as the other writes,
// each statement checking again that its row is still dead and died no later
// than the bound.
func (a *admin) ActDead(ctx context.Context, db store.DB, act store.DeadAction, evs []store.DeadBrief, upTo int64) (int64, error) {
	var q string
	cond := ` WHERE o.dead_at IS NOT NULL AND o.dead_at <= ` + deadBound
	switch act {
	case store.ActRequeue:
		q = `UPDATE ` + bySeq + ` SET ` + requeueSet + cond
	case store.ActPurge:
		q = `DELETE o FROM ` + bySeq + cond
	default:
		return 0, fmt.Errorf("mysql: unknown dead action %d", act)
	}
	q = strings.ReplaceAll(q, "{t}", Quote(a.t))
	return sqlkit.ActChunks(ctx, db, readCommitted, act == store.ActPurge, sqlkit.DeadSeqs(evs), func(c []int64) any { return sqlkit.JSONInts(c) }, q, upTo)
}

func (a *admin) CreateAudit(ctx context.Context, x store.Execer) error {
	return schema.CreateAdmin(ctx, x, a.t)
}

func (a *admin) AddAudit(ctx context.Context, x store.Execer, e store.AuditEntry) error {
	_, err := x.ExecContext(ctx, `INSERT INTO `+Quote(a.t.Derived("_audit"))+` (at, actor, action, detail, events) VALUES (`+Now+`, ?, ?, ?, ?)`,
		e.By, e.Action, e.Detail, e.Events)
	return err
}

func (a *admin) FindAudit(ctx context.Context, x store.Execer, limit int) ([]store.AuditEntry, error) {
	ok, err := schema.AdminExists(ctx, x, a.t)
	if err != nil || !ok {
		return nil, err
	}
	return sqlkit.Collect(ctx, x, `SELECT seq, at, actor, action, detail, events FROM `+Quote(a.t.Derived("_audit"))+` ORDER BY seq DESC LIMIT ?`,
		[]any{limit}, func(rows *sql.Rows) (store.AuditEntry, error) {
			var (
				e  store.AuditEntry
				at any
			)
			if err := rows.Scan(&e.Seq, &at, &e.By, &e.Action, &e.Detail, &e.Events); err != nil {
				return e, err
			}
			var err error
			e.At, err = parseTime(at)
			return e, err
		})
}
