package postgres

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// Relay returns the relay's operations on the outbox table t.
func (Driver) Relay(t ident.Table) store.Relay { return newRelay(t) }

// partitionExpr is the ordering partition of a row: a hash of its aggregate, or
// of its id for events that belong to no aggregate.
const partitionExpr = `mod(abs(hashtext(CASE WHEN o.aggregate_id = '' THEN o.id::text ELSE o.aggregate_type || ':' || o.aggregate_id END)::bigint), $2)`

const pending = `processed_at IS NULL AND dead_at IS NULL`

// pendingSince is when a pending event began to wait, for the oldest pending
// age: its write, or for a scheduled event its due time (NULL while it is not
// due: an event scheduled for tomorrow is not late today).
const pendingSince = `CASE WHEN due_at IS NULL THEN created_at WHEN due_at <= now() THEN greatest(created_at, due_at) END`

// asyncCommit, joined into a statement (the heartbeat's beat; the claim sets
// the same inline), turns synchronous_commit off for the relay's
// transaction: its COMMIT does not wait for the WAL flush. Only marks and
// beats are committed so; if PostgreSQL crashes before the flush, the marks
// are lost and the events published again, which at-least-once delivery
// allows, and a beat is made again. It saves the relay a disk flush per
// batch.
const asyncCommit = `(SELECT set_config('synchronous_commit', 'off', true)) AS herald_async`

const claimCols = `o.id::text, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.payload::text, o.metadata::text, o.occurred_at, o.attempts, o.strikes`

// requeueSet makes a dead event pending again (the admin's requeues).
// created_at is reset too: the oldest pending age (Stats, the admin's Topics)
// counts from the requeue, not from the first insert, or a requeued event
// would make the outbox unhealthy at once. Nothing else reads created_at (the
// partitioned outbox is partitioned by occurred_at, which is kept).
const requeueSet = `dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = now(), created_at = now()`

// relay is store.Relay on PostgreSQL. Its files are by job, as every
// driver's are (the map is in package store's doc): claim.go (the claims and
// the ordered sweep), batch.go (a claimed batch, which marks itself and keeps
// or forgets the position), mark.go (the marks and their fence),
// recovery.go, stats.go, cleanup.go, leases.go; and PostgreSQL's
// own: position.go (where claims start: the state machine), frontier.go (the
// epoch locks and the frontier read from pg_locks), partitions.go (retention
// by partition drop). This file: the relay's statements and the pieces of SQL
// they share.
type relay struct {
	t      ident.Table
	claims claimQueries
	marks  markQueries
	q      func() *relayQueries // made at first use: a fleet's tenant relay often claims and marks only
	leases leases
	pos    *position // where claims start
}

// relayQueries are the relay's statements other than the claims' and the
// marks'.
type relayQueries struct {
	recoverOutage, recoverOwned, stats, unheld, scheduled, nextDue, storage, requeue, requeueAll, cleanup, cleanupDefault string
}

// newRelay returns the relay of the outbox t, its statements built once.
func newRelay(t ident.Table) *relay {
	r := &relay{t: t, pos: newPosition(time.Now)}
	rep := strings.NewReplacer("{set}", requeueSet, "{async}", asyncCommit, "{t}", t.Quoted(), "{cols}", claimCols, "{pending}", pending, "{part}", partitionExpr, "{since}", pendingSince)
	r.claims = newClaimQueries(t, rep)
	r.marks = newMarkQueries(t, rep)
	r.q = sync.OnceValue(func() *relayQueries { return newRelayQueries(t, rep) })
	r.leases = newLeases(t, r.pos)
	return r
}

func newRelayQueries(t ident.Table, rep *strings.Replacer) *relayQueries {
	q := &relayQueries{}
	recover := `WITH u AS (UPDATE {t} AS o SET available_at = statement_timestamp()
FROM (SELECT DISTINCT * FROM unnest($2::text[], $3::text[])) AS k(topic, type)
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0
  AND o.available_at > statement_timestamp() AND o.last_failed_at >= $1
  AND o.topic = k.topic AND o.type = k.type{owned}
RETURNING 1)
SELECT count(*) FROM u`
	q.recoverOutage = rep.Replace(strings.Replace(recover, "{owned}", "", 1))
	// Only the partitions leased to $5 ($4 partitions) by the lease table,
	// under the generations it holds ($6, $7), the lease rows locked against
	// an Acquire until the statement ends.
	q.recoverOwned = rep.Replace(strings.Replace(recover, "{owned}", `
  AND `+strings.Replace(partitionExpr, "$2", "$4", 1)+` IN (SELECT l.partition FROM `+t.Derived("_leases").Quoted()+` l
    JOIN unnest($6::int[], $7::bigint[]) AS g(part, gen) ON l.partition = g.part AND l.generation = g.gen
    WHERE l.owner = $5 AND l.expires_at > statement_timestamp() FOR SHARE OF l)`, 1))
	q.stats = rep.Replace(`SELECT p.n, p.failing, (SELECT count(*) FROM {t} WHERE dead_at IS NOT NULL), p.age
FROM (SELECT count(*) AS n, count(*) FILTER (WHERE attempts > 0) AS failing,
        extract(epoch FROM now() - min({since})) AS age
      FROM {t} WHERE {pending}) AS p`)
	q.unheld = rep.Replace(unheldSQL)
	q.scheduled, q.nextDue = rep.Replace(scheduledStatsSQL), rep.Replace(nextDueSQL)
	q.storage = storageSQL
	q.requeue = rep.Replace(`UPDATE {t} SET {set}
WHERE id = $1::uuid AND dead_at IS NOT NULL`)
	q.requeueAll = rep.Replace(`UPDATE {t} SET {set}
WHERE dead_at IS NOT NULL`)
	cleanup := `DELETE FROM {t} WHERE id IN (
  SELECT id FROM {t} WHERE processed_at < now() - $1::float8 * interval '1 millisecond' LIMIT $2)`
	q.cleanup = rep.Replace(cleanup)
	q.cleanupDefault = strings.ReplaceAll(cleanup, "{t}", t.Derived("_default").Quoted())
	return q
}

func (r *relay) Create(ctx context.Context, x store.Execer, p store.RelayCreateParams) error {
	return schema.CreateRelay(ctx, x, r.t, p)
}

func (Driver) RelayLookups(t ident.Table, p store.RelayCreateParams) ([]store.Object, error) {
	return schema.RelayLookups(t, p)
}

func (r *relay) Check(ctx context.Context, x store.Execer, p store.RelayCheckParams) error {
	return schema.CheckRelay(ctx, x, r.t, p)
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
