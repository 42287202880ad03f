package relay

import (
	"fmt"
	"strings"

	"github.com/heraldgo/herald/internal/ident"
)

// queries holds the relay's SQL for one outbox table.
type queries struct {
	claimUnordered string // $1 limit
	claimOrdered   string // $1 limit, $2 partitions, $3 owned partitions
	markDelete     string // $1 ids
	markProcessed  string // $1 ids
	markFailed     string // $1 ids, $2 errors, $3 poison, $4 confirmed, $5 min ms, $6 max ms, $7 max attempts
	recoverOutage  string // $1 outage began (database time), $2 topics, $3 types
	stats          string
	dead           string // $1 limit
	requeue        string // $1 id
	requeueAll     string
	cleanup        string // $1 retention ms, $2 limit
	schema         []ddl
}

// partitionExpr is the ordering partition of a row: a hash of its aggregate, or
// of its id for events that belong to no aggregate.
const partitionExpr = `mod(abs(hashtext(CASE WHEN o.aggregate_id = '' THEN o.id::text ELSE o.aggregate_type || ':' || o.aggregate_id END)::bigint), $2)`

const pending = `processed_at IS NULL AND dead_at IS NULL`

// asyncCommit, joined into the first statement of the relay's transactions,
// turns synchronous_commit off for them: their COMMIT does not wait for the WAL
// flush. Only marks are committed so (published or failed); if PostgreSQL
// crashes before the flush, the marks are lost and the events published again,
// which at-least-once delivery allows. It saves the relay a disk flush per batch.
const asyncCommit = `(SELECT set_config('synchronous_commit', 'off', true)) AS herald_async`

func newQueries(table ident.Table) queries {
	t := table.Quoted()
	cols := `o.id, o.type, o.version, o.aggregate_type, o.aggregate_id, o.topic, o.payload, o.metadata, o.occurred_at, o.attempts`
	r := strings.NewReplacer("{async}", asyncCommit, "{t}", t, "{cols}", cols, "{pending}", pending, "{part}", partitionExpr)
	return queries{
		// The pending index (available_at, id) serves this scan in order; locked
		// rows are skipped, so instances share the work.
		claimUnordered: r.Replace(`SELECT {cols} FROM {t} o, {async}
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
ORDER BY o.available_at, o.id LIMIT $1 FOR UPDATE OF o SKIP LOCKED`),
		// Only this instance reads its partitions, so no row locks. An event is due
		// unless an earlier event of its aggregate waits for a retry ("blocked",
		// usually few rows). As an anti-join, not a NOT EXISTS per row: the
		// per-row subplan made the planner's estimate big enough to JIT-compile
		// every claim (200 ms each) once the backlog grew.
		claimOrdered: r.Replace(`WITH blocked AS MATERIALIZED (
  SELECT aggregate_type, aggregate_id, min(seq) AS seq FROM {t}
  WHERE {pending} AND available_at > now() AND aggregate_id <> ''
  GROUP BY aggregate_type, aggregate_id)
SELECT {cols} FROM {t} o
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
  AND {part} = ANY($3::int[])
  AND NOT EXISTS (SELECT 1 FROM blocked b
    WHERE b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id AND b.seq < o.seq)
ORDER BY o.seq LIMIT $1`),
		markDelete:    r.Replace(`DELETE FROM {t} WHERE id = ANY($1::uuid[])`),
		markProcessed: r.Replace(`UPDATE {t} SET processed_at = now(), last_error = NULL WHERE id = ANY($1::uuid[])`),
		// Every failure is an attempt and schedules the retry after the
		// backoff of the new attempt count (MinBackoff·2^(attempts-1), capped,
		// jittered to between half and all of it), by the database's clock. Only
		// a confirmed failure (the publisher was seen to work after it) is a
		// strike; MaxAttempts strikes kill, poison kills at once.
		markFailed: r.Replace(`UPDATE {t} AS o SET
  attempts = o.attempts + 1,
  strikes = o.strikes + CASE WHEN u.confirmed THEN 1 ELSE 0 END,
  last_error = u.err,
  last_failed_at = statement_timestamp(),
  available_at = statement_timestamp()
    + least($5::float8 * power(2, least(o.attempts, 40)), $6::float8) * (0.5 + random() / 2) * interval '1 millisecond',
  dead_at = CASE WHEN u.poison OR (u.confirmed AND o.strikes + 1 >= $7) THEN statement_timestamp() END
FROM unnest($1::uuid[], $2::text[], $3::bool[], $4::bool[]) AS u(id, err, poison, confirmed)
WHERE o.id = u.id AND o.processed_at IS NULL AND o.dead_at IS NULL
RETURNING o.id::text, o.dead_at IS NOT NULL, statement_timestamp()`),
		// After an outage: the retries of the events of these topics and types
		// that failed since it began are due now.
		recoverOutage: r.Replace(`UPDATE {t} AS o SET available_at = statement_timestamp()
FROM (SELECT DISTINCT * FROM unnest($2::text[], $3::text[])) AS k(topic, type)
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.attempts > 0
  AND o.available_at > statement_timestamp() AND o.last_failed_at >= $1
  AND o.topic = k.topic AND o.type = k.type`),
		stats: r.Replace(`SELECT p.n, p.failing, (SELECT count(*) FROM {t} WHERE dead_at IS NOT NULL), p.age
FROM (SELECT count(*) AS n, count(*) FILTER (WHERE attempts > 0) AS failing,
        extract(epoch FROM now() - min(created_at)) AS age
      FROM {t} WHERE {pending}) AS p`),
		dead: r.Replace(`SELECT {cols}, o.strikes, o.last_error, o.dead_at FROM {t} o WHERE o.dead_at IS NOT NULL ORDER BY o.dead_at, o.seq LIMIT $1`),
		requeue: r.Replace(`UPDATE {t} SET dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = now()
WHERE id = $1 AND dead_at IS NOT NULL`),
		requeueAll: r.Replace(`UPDATE {t} SET dead_at = NULL, attempts = 0, strikes = 0, last_failed_at = NULL, available_at = now()
WHERE dead_at IS NOT NULL`),
		cleanup: r.Replace(`DELETE FROM {t} WHERE id IN (
  SELECT id FROM {t} WHERE processed_at < now() - $1::float8 * interval '1 millisecond' LIMIT $2)`),
		schema: schemaStatements(table),
	}
}

// ddl is a CREATE ... IF NOT EXISTS statement and the (qualified, quoted)
// name of what it creates; required ones (the lease tables of ordered mode) the
// relay cannot work without, the others (indexes) only make it faster.
type ddl struct {
	name, sql string
	required  bool
}

// schemaStatements are the relay's additions to the outbox: the partition lease
// and instance tables of ordered mode, and the indexes for ordered claims, dead
// events and retention. Each is created when missing.
func schemaStatements(table ident.Table) []ddl {
	t := table.Quoted()
	obj := func(suffix, format string, args ...any) ddl {
		return ddl{name: table.Derived(suffix).Quoted(), sql: fmt.Sprintf(format, args...)}
	}
	required := func(d ddl) ddl {
		d.required = true
		return d
	}
	idx := func(suffix string) string { return table.Derived(suffix).Name.Quoted() }
	return []ddl{
		required(obj("_leases", `CREATE TABLE IF NOT EXISTS %s (
    partition  int         PRIMARY KEY,
    owner      text        NOT NULL DEFAULT '',
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
)`, table.Derived("_leases").Quoted())),
		required(obj("_relays", `CREATE TABLE IF NOT EXISTS %s (
    instance text        PRIMARY KEY,
    seen_at  timestamptz NOT NULL
)`, table.Derived("_relays").Quoted())),
		obj("_ordered_idx", `CREATE INDEX IF NOT EXISTS %s ON %s (seq) WHERE %s`, idx("_ordered_idx"), t, pending),
		obj("_aggregate_idx", `CREATE INDEX IF NOT EXISTS %s ON %s (aggregate_type, aggregate_id, seq) WHERE %s`, idx("_aggregate_idx"), t, pending),
		obj("_dead_idx", `CREATE INDEX IF NOT EXISTS %s ON %s (dead_at) WHERE dead_at IS NOT NULL`, idx("_dead_idx"), t),
		obj("_processed_idx", `CREATE INDEX IF NOT EXISTS %s ON %s (processed_at) WHERE processed_at IS NOT NULL`, idx("_processed_idx"), t),
	}
}

// SchemaSQL returns the DDL of the relay's additions to the outbox table named
// table (see the outboxhook package for the table itself). For the default name
// it is the content of migrations/0001_relay.sql; run it as the table's owner when
// the relay's role may not create objects. It fails for a name that
// Config.Validate would refuse.
func SchemaSQL(table string) (string, error) {
	t, err := ident.ParseTable(table)
	if err != nil {
		return "", fmt.Errorf("relay: %w", err)
	}
	var b strings.Builder
	for _, s := range schemaStatements(t) {
		b.WriteString(s.sql)
		b.WriteString(";\n")
	}
	return b.String(), nil
}
