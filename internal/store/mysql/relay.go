package mysql

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Relay returns the relay's operations on the outbox table t.
func (Driver) Relay(t ident.Table) store.Relay { return newRelay(t) }

const pending = `processed_at IS NULL AND dead_at IS NULL`

// pendingSince is when a pending event began to wait, for the oldest pending
// age: its write, or for a scheduled event its due time (NULL while it is not
// due: an event scheduled for tomorrow is not late today).
const pendingSince = `CASE WHEN due_at IS NULL THEN created_at WHEN due_at <= ` + Now + ` THEN GREATEST(created_at, due_at) END`

const claimCols = `o.seq, o.id, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.payload, o.metadata, o.occurred_at, o.attempts, o.strikes`

// partitionExpr is the ordering partition of a row: a CRC-32 of its
// aggregate, or of its id for events that belong to no aggregate.
const partitionExpr = `MOD(CRC32(CASE WHEN o.aggregate_id = '' THEN o.id ELSE CONCAT(o.aggregate_type, ':', o.aggregate_id) END), ?)`

// bySeq joins rows by primary key from seqs (a JSON array, one placeholder),
// in that order: with "WHERE seq IN (...)" the optimizer scans the whole
// table when it is small (as an outbox mostly is), which in REPEATABLE READ
// locks every row it reads, those other relays claimed too: their marks
// deadlocked, and the batch rolled back was published again; and a DELETE
// that scans waits for every row others locked, even at READ COMMITTED. By
// the primary key, a statement touches the clustered rows directly (by the
// id key, it read that index first: a fifth slower burn-down); a list of
// UNION ALL selects costs more to parse than the JSON. The primary key is
// forced: a statement's own condition on dead_at (a purge's "dead before")
// otherwise lets the optimizer range-check the queue index per row, whose
// scan of the dead rows ends on the first pending one, which a relay's batch
// holds locked.
const bySeq = `JSON_TABLE(?, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS k STRAIGHT_JOIN {t} AS o FORCE INDEX (PRIMARY) ON o.seq = k.seq`

// requeueSet makes a dead event pending again (the admin's requeues).
// created_at is reset too: the oldest pending age (Stats, the admin's Topics)
// counts from the requeue, not from the first insert, or a requeued event
// would make the outbox unhealthy at once. Nothing else reads created_at (the
// partitioned outbox is partitioned by occurred_at, which is kept).
const requeueSet = `dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = ` + Now + `, created_at = ` + Now

type relay struct {
	sqlkit.Unpositioned // no claim position, no partitions
	t                   ident.Table
	q                   struct {
		claimLocked, claimOrdered, stats, unheld, scheduled, nextDue, seqOf, requeue, deadSeqs, requeueSeqs, cleanup, fenceHeld string
		// by fencing: [none, the partition leases]
		markProcessed, markDelete, markFailed, recoverOutage [2]string
		// the confirmation of an ordered batch's scheduled rows, by
		// server: [MySQL, MariaDB]
		confirm [2]string
	}
	leases leases
	// server is what the confirmation learnt the server is: 0 not yet,
	// else serverMySQL or serverMariaDB.
	server atomic.Int32
}

func newRelay(t ident.Table) *relay {
	r := &relay{t: t}
	rep := strings.NewReplacer("{set}", requeueSet, "{t}", Quote(t), "{cols}", claimCols, "{pending}", pending, "{now}", Now, "{since}", pendingSince, "{part}", partitionExpr,
		"{leases}", Quote(t.Derived("_leases")))
	q := &r.q
	// The queue index (dead_at DESC, processed_at DESC, available_at, seq;
	// 0006_queue_index: on tables made before it, 0001's pending index, the
	// same without DESC) serves the scan in order; locked rows are skipped,
	// so instances share the work. A claim that takes every due event keeps
	// the lock on the index entry after them until the batch ends: in the
	// queue index an event not yet due (or none), in the pending index a
	// processed or dead row, whose cleanup, purge or requeue then waits.
	q.claimLocked = rep.Replace(`SELECT {cols} FROM {t} o
WHERE o.dead_at IS NULL AND o.processed_at IS NULL AND o.available_at <= {now}
ORDER BY o.available_at, o.seq LIMIT ? FOR UPDATE SKIP LOCKED`)
	// It also reads whether each row is a scheduled event, which the claim
	// confirms (confirm) before it returns it.
	// The events due at once (due_at NULL) are read in seq order through
	// the ordered index, where the scheduled ones sort after them; the
	// scheduled ones due through the scheduled index (few: they are
	// published as they come due); the lowest of both in seq order are
	// claimed. An event is held back while an earlier event of its
	// aggregate is pending and not due (a retry, an event scheduled in
	// line), asked per candidate through the aggregate index: a set of the
	// blocked aggregates built first read every event scheduled for later
	// at each claim.
	ordered := `(SELECT {cols}, o.due_at IS NOT NULL AS scheduled FROM {t} o FORCE INDEX ({schedIdx})
  WHERE o.dead_at IS NULL AND o.processed_at IS NULL AND {due} AND o.available_at <= {now}
    AND {part} IN ({owned})
    AND NOT EXISTS (SELECT 1 FROM {t} b
      WHERE b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id AND b.dead_at IS NULL
        AND b.processed_at IS NULL AND b.seq < o.seq AND b.available_at > {now} AND b.aggregate_id <> '')
  ORDER BY o.seq LIMIT ?)`
	// Both branches through the scheduled index (dead_at, processed_at,
	// due_at; InnoDB appends the key, seq): MariaDB otherwise reads the
	// first in seq order by the primary key, and steps over every event
	// scheduled for later at each claim (205,000 rows a claim under 200,000
	// scheduled).
	ordered = strings.Replace(ordered, "{schedIdx}", Quote(ident.Table{Name: t.Derived("_scheduled_idx").Name}), 1)
	q.claimOrdered = rep.Replace(strings.Replace(ordered, "{due}", "o.due_at IS NULL", 1) + `
UNION ALL
` + strings.Replace(ordered, "{due}", "o.due_at IS NOT NULL AND o.due_at <= {now}", 1) + `
ORDER BY seq LIMIT ?`)
	// In ordered mode the marks are fenced. First fenceHeld share-locks the
	// batch's leases that are still this instance's ($owner) under the
	// generation the batch holds (the fence, [partition, generation] pairs):
	// a locking read, of the newest committed version at REPEATABLE READ and
	// READ COMMITTED alike, held until the marks commit, so no Acquire takes
	// those partitions before. With every lease held the plain marks follow
	// (nothing can change under them); with one lost, the fenced marks join
	// each row to its partition's lease the same way, and change only the
	// rows of the partitions still held.
	const fenced = ` STRAIGHT_JOIN {leases} AS l ON l.` + "`partition`" + ` = {part} AND l.owner = ?
STRAIGHT_JOIN JSON_TABLE(?, '$[*]' COLUMNS (p INT PATH '$[0]', g BIGINT PATH '$[1]')) AS f ON f.p = l.` + "`partition`" + ` AND f.g = l.generation`
	q.fenceHeld = rep.Replace(`SELECT COUNT(*) FROM {leases} AS l
JOIN JSON_TABLE(?, '$[*]' COLUMNS (p INT PATH '$[0]', g BIGINT PATH '$[1]')) AS f ON f.p = l.` + "`partition`" + ` AND f.g = l.generation
WHERE l.owner = ? LOCK IN SHARE MODE`)
	for i, join := range [2]string{``, fenced} {
		q.markDelete[i] = rep.Replace(`DELETE o FROM ` + bySeq + join)
		q.markProcessed[i] = rep.Replace(`UPDATE ` + bySeq + join + ` SET o.processed_at = {now}, o.last_error = NULL`)
		q.markFailed[i] = rep.Replace(`UPDATE {t} AS o` + join + ` SET
  o.attempts = o.attempts + 1,
  o.strikes = o.strikes + ?,
  o.last_error = ?,
  o.last_failed_at = {now},
  o.available_at = {now} + INTERVAL ? MICROSECOND,
  o.dead_at = CASE WHEN ? THEN {now} END
WHERE o.id = ? AND o.processed_at IS NULL AND o.dead_at IS NULL`)
	}
	for i, join := range [2]string{``, fenced} {
		q.recoverOutage[i] = rep.Replace(`UPDATE {t} AS o` + join + ` SET o.available_at = {now}
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0 AND o.available_at > {now}
  AND o.last_failed_at >= ? AND o.topic = ? AND o.type = ?`)
	}
	q.stats = rep.Replace(`SELECT COUNT(*), COALESCE(SUM(attempts > 0), 0), TIMESTAMPDIFF(MICROSECOND, MIN({since}), {now}),
  (SELECT COUNT(*) FROM {t} WHERE dead_at IS NOT NULL)
FROM {t} WHERE {pending}`)
	q.unheld = rep.Replace(unheldSQL)
	q.scheduled, q.nextDue = rep.Replace(scheduledStatsSQL), rep.Replace(nextDueSQL)
	for i, share := range [2]string{shareSkipMySQL, shareSkipMariaDB} {
		q.confirm[i] = strings.Replace(rep.Replace(confirmSQL), "{share}", share, 1)
	}
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
	q.cleanup = rep.Replace(`DELETE FROM {t} WHERE processed_at < {now} - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?`)
	r.leases = newLeases(t)
	return r
}

func (r *relay) Create(ctx context.Context, x store.Execer, p store.RelayCreateParams) error {
	return schema.CreateRelay(ctx, x, r.t, p)
}

func (r *relay) Check(ctx context.Context, x store.Execer, p store.RelayCheckParams) error {
	return schema.CheckRelay(ctx, x, r.t, p)
}

// bySeqs runs q on the rows seqs (its first argument, a JSON array), a
// thousand at a time, with the arguments more after them, and returns the
// rows it changed.
func bySeqs(ctx context.Context, x store.Execer, q string, seqs []int64, more ...any) (int64, error) {
	var total int64
	for len(seqs) > 0 {
		chunk := seqs[:min(len(seqs), 1000)]
		seqs = seqs[len(chunk):]
		n, err := sqlkit.Affected(ctx, x, q, append([]any{sqlkit.JSONInts(chunk)}, more...)...)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
