package sqlite

import (
	"context"
	"strings"

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
const pendingSince = `CASE WHEN due_at IS NULL THEN created_at WHEN due_at <= ` + Now + ` THEN max(created_at, due_at) END`

const claimCols = `id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, attempts, strikes`

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
		dueLeased, claimLeased, claimOrdered, confirm, stats, unheld, nextDue, requeue, requeueAll, cleanup, fenceHeld string
		recoverOutage                                                                                                  [2]string // [unfenced, fenced]
		// by fencing: [none, the claim's lease, the partition leases]
		markDelete, markProcessed, markFailed [3]string
		unlease                               string
	}
	leases leases
}

func newRelay(t ident.Table) *relay {
	r := &relay{t: t}
	lt := t.Derived("_leases").Quoted()
	rep := strings.NewReplacer("{set}", requeueSet, "{t}", t.Quoted(), "{cols}", claimCols, "{pending}", pending, "{now}", Now, "{since}", pendingSince, "{leases}", lt)
	q := &r.q
	// The due rows in due order, then one statement, under SQLite's single
	// writer, that leases those still due: the rows it moves past the lease
	// are this claim's alone. The claim keeps the due order, as on the other
	// databases (a failed event waits behind the others, not ahead of them in
	// every batch); RETURNING gives neither that order nor the old
	// available_at, hence the read first.
	q.dueLeased = rep.Replace(`SELECT seq FROM {t} WHERE {pending} AND available_at <= {now} ORDER BY available_at, seq LIMIT ?`)
	q.claimLeased = rep.Replace(`UPDATE {t} SET available_at = {now} + ?
WHERE seq IN (SELECT value FROM json_each(?)) AND {pending} AND available_at <= {now}
RETURNING seq, {cols}, available_at`)
	// An event is blocked by a pending event of its aggregate before it that
	// is not due (a retry waiting). Asked per candidate through the aggregate
	// index (aggregate_type, aggregate_id, seq), it reads only the events of
	// the candidate's aggregate before it; a set of the blocked aggregates
	// built first (a CTE) read every pending event at each claim, and made a
	// burn-down's claims quadratic in the backlog.
	// The events due at once (due_at NULL) are read in seq order through
	// the ordered index, which holds no scheduled event; the scheduled ones
	// due through the scheduled index (few: they are published as they come
	// due); the lowest of both in seq order are claimed. Through one index,
	// every claim stepped over every event scheduled for later. The second
	// orders by +seq: by seq, SQLite scanned the whole table in rowid order
	// for the few due scheduled events (45 ms a claim at 120,000 rows).
	ordered := `SELECT * FROM (SELECT o.seq, o.id, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.payload, o.metadata,
    o.occurred_at, o.attempts, o.strikes, o.due_at IS NOT NULL AS scheduled
  FROM {t} o
  WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND {due} AND o.available_at <= {now}
    AND o.part_key % ? IN ({owned})
    AND NOT EXISTS (SELECT 1 FROM {t} b
      WHERE b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id AND b.seq < o.seq
        AND b.processed_at IS NULL AND b.dead_at IS NULL AND b.available_at > {now} AND b.aggregate_id <> '')
  ORDER BY o.seq LIMIT ?)`
	q.claimOrdered = rep.Replace(strings.Replace(ordered, "{due}", "o.due_at IS NULL", 1) + `
UNION ALL
` + strings.Replace(strings.Replace(ordered, "{due}", "o.due_at IS NOT NULL AND o.due_at <= {now}", 1),
		"ORDER BY o.seq", "ORDER BY +o.seq", 1) + `
ORDER BY seq LIMIT ?`)
	// The ordered claim reads without a lock, in a snapshot: a Reschedule
	// whose transaction deleted or moved a scheduled row it read, and has not
	// committed, is not seen. This no-op write of the batch's scheduled rows
	// (by seq) waits for the write lock, so for that transaction's end, and
	// returns the ids of those still pending and due.
	q.confirm = rep.Replace(`UPDATE {t} SET due_at = due_at
WHERE seq IN (SELECT value FROM json_each(?)) AND {pending} AND available_at <= {now}
RETURNING id`)
	// Marks find their rows by seq, the rowid, and are fenced: by the
	// claim's own lease (ClaimLeased: the available_at it set, which a later
	// claim of the row, or anything that made it due again, changed), or in
	// ordered mode by the partition leases of the batch (the row's partition
	// still leased to this instance under the generation it took). SQLite has
	// one writer: no Acquire runs between the check and the write.
	const bySeq = `seq IN (SELECT value FROM json_each(?))`
	const byLease = `(seq, available_at) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))`
	const fenced = `part_key % ? IN (SELECT l.partition FROM {leases} l JOIN json_each(?) f
    ON l.partition = json_extract(f.value, '$[0]') AND l.generation = json_extract(f.value, '$[1]')
  WHERE l.owner = ?)`
	q.fenceHeld = rep.Replace(`SELECT count(*) FROM {leases} l JOIN json_each(?) f
  ON l.partition = json_extract(f.value, '$[0]') AND l.generation = json_extract(f.value, '$[1]')
WHERE l.owner = ?`)
	for i, where := range [3]string{bySeq, byLease, bySeq + ` AND ` + fenced} {
		q.markDelete[i] = rep.Replace(`DELETE FROM {t} WHERE ` + where)
		q.markProcessed[i] = rep.Replace(`UPDATE {t} SET processed_at = {now}, last_error = NULL WHERE ` + where)
	}
	q.unlease = rep.Replace(`UPDATE {t} SET available_at = min(coalesce(last_failed_at, created_at), {now})
WHERE {pending} AND ` + byLease)
	for i, where := range [3]string{``, ` AND available_at = ?`, ` AND ` + fenced} {
		q.markFailed[i] = rep.Replace(`UPDATE {t} SET
  attempts = attempts + 1,
  strikes = strikes + ?,
  last_error = ?,
  last_failed_at = ?,
  available_at = ? + ?,
  dead_at = CASE WHEN ? THEN ? END
WHERE id = ? AND {pending}` + where)
	}
	for i, where := range [2]string{``, ` AND ` + fenced} {
		q.recoverOutage[i] = rep.Replace(`UPDATE {t} SET available_at = {now}
WHERE {pending} AND attempts > 0 AND available_at > {now} AND last_failed_at >= ? AND topic = ? AND type = ?` + where)
	}
	// The scheduled events' figures go through the scheduled index (due_at,
	// of the pending scheduled rows): their count, the earliest not due yet,
	// the earliest due.
	q.stats = rep.Replace(`SELECT count(*), coalesce(sum(attempts > 0), 0), {now} - min({since}),
  (SELECT count(*) FROM {t} WHERE dead_at IS NOT NULL),
  (SELECT count(*) FROM {t} WHERE due_at IS NOT NULL AND {pending}),
  (SELECT min(due_at) - {now} FROM {t} WHERE due_at > {now} AND {pending}),
  (SELECT {now} - min(due_at) FROM {t} WHERE due_at IS NOT NULL AND due_at <= {now} AND {pending})
FROM {t} WHERE {pending}`)
	q.unheld = rep.Replace(unheldSQL)
	// The earliest pending scheduled event not due yet, through the
	// scheduled index (due_at, of the pending scheduled events).
	q.nextDue = rep.Replace(`SELECT min(due_at) - {now} FROM {t} WHERE due_at IS NOT NULL AND {pending} AND due_at > {now}`)
	q.requeue = rep.Replace(`UPDATE {t} SET {set}
WHERE id = ? AND dead_at IS NOT NULL`)
	q.requeueAll = rep.Replace(`UPDATE {t} SET {set}
WHERE dead_at IS NOT NULL`)
	q.cleanup = rep.Replace(`DELETE FROM {t} WHERE seq IN (SELECT seq FROM {t} WHERE processed_at < {now} - ? LIMIT ?)`)
	r.leases = newLeases(t)
	return r
}

func (r *relay) Create(ctx context.Context, x store.Execer, p store.RelayCreateParams) error {
	return schema.CreateRelay(ctx, x, r.t, p)
}

func (r *relay) Check(ctx context.Context, x store.Execer, p store.RelayCheckParams) error {
	return schema.CheckRelay(ctx, x, r.t, p)
}
