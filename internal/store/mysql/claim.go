package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Claim claims a batch. Unordered: the due rows locked (FOR UPDATE SKIP
// LOCKED) in a READ COMMITTED transaction the batch keeps while it publishes
// and marks in, so no gap lock holds back the application's inserts. Ordered:
// the owned partitions read without locks, the batch's scheduled events then
// confirmed (claimOrdered); the marks, fenced by the partition leases, in a
// READ COMMITTED transaction of their own.
func (r *relay) Claim(ctx context.Context, db store.DB, p store.ClaimParams) (store.Batch, error) {
	if o := p.Ordered; o != nil {
		rows, err := r.claimOrdered(ctx, db, p.Limit, o.Partitions, o.Owned)
		if err != nil {
			return nil, err
		}
		return batch{sqlkit.NewMarks(r, p, db, readCommitted, nil, rows)}, nil
	}
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	rows, err := r.claimLocked(ctx, tx, p.Limit)
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return batch{sqlkit.NewMarks(r, p, db, readCommitted, tx, rows)}, nil
}

// claimQueries are the claims' statements: the unordered claim, the ordered
// claim and the confirmation of its scheduled rows in each server's SQL.
type claimQueries struct {
	locked                       string
	ordered                      [2]string // by [blockers index]
	confirmMySQL, confirmMariaDB string
}

// newClaimQueries builds the claims of the outbox t with rep (newRelay's).
func newClaimQueries(t ident.Table, rep *strings.Replacer) claimQueries {
	var q claimQueries
	// The queue index (dead_at DESC, processed_at DESC, available_at, seq;
	// 0006_queue_index: on tables made before it, 0001's pending index, the
	// same without DESC) serves the scan in order; locked rows are skipped,
	// so instances share the work. A claim that takes every due event keeps
	// the lock on the index entry after them until the batch ends: in the
	// queue index an event not yet due (or none), in the pending index a
	// processed or dead row, whose cleanup, purge or requeue then waits.
	q.locked = rep.Replace(`SELECT {cols} FROM {t} o
WHERE o.dead_at IS NULL AND o.processed_at IS NULL AND o.available_at <= {now}
ORDER BY o.available_at, o.seq LIMIT ? FOR UPDATE SKIP LOCKED`)
	// It also reads whether each row is a scheduled event, which the claim
	// confirms (confirm) before it returns it.
	// The events due at once (due_at NULL) are read in seq order through
	// the scheduled index (below), where the scheduled ones sort after them; the
	// scheduled ones due through the scheduled index (few: they are
	// published as they come due); the lowest of both in seq order are
	// claimed. An event is held back while an earlier event of its
	// aggregate is pending and not due (a retry, an event scheduled in
	// line), asked per candidate through an index by aggregate: a set of the
	// blocked aggregates built first read every event scheduled for later
	// at each claim. An event neither scheduled nor retried is due whatever
	// its available_at says (later than the clock only after the clock
	// stepped back): it is claimed, and never holds its aggregate back, so
	// that the blockers index (0009_blockers_idx) need not hold it. Where
	// that index is not there yet (an outbox made before it), the lookup
	// goes through 0002's aggregate index, which holds every event.
	ordered := `(SELECT {cols}, o.due_at IS NOT NULL AS scheduled FROM {t} o FORCE INDEX ({schedIdx})
  WHERE o.dead_at IS NULL AND o.processed_at IS NULL AND {due}
    AND {part} IN ({owned})
    AND NOT EXISTS (SELECT 1 FROM {t} b{blockers}
        AND b.dead_at IS NULL AND b.processed_at IS NULL AND b.seq < o.seq AND b.available_at > {now} AND b.aggregate_id <> '')
  ORDER BY o.seq LIMIT ?)`
	// Both branches through the scheduled index (dead_at, processed_at,
	// due_at; InnoDB appends the key, seq): MariaDB otherwise reads the
	// first in seq order by the primary key, and steps over every event
	// scheduled for later at each claim (205,000 rows a claim under 200,000
	// scheduled).
	ordered = strings.Replace(ordered, "{schedIdx}", Quote(ident.Table{Name: t.Derived("_scheduled_idx").Name}), 1)
	for i, b := range byAggregate("b", "o") {
		o := strings.Replace(ordered, "{blockers}", b, 1)
		q.ordered[i] = rep.Replace(strings.Replace(o, "{due}", "o.due_at IS NULL AND (o.attempts = 0 OR o.available_at <= {now})", 1) + `
UNION ALL
` + strings.Replace(o, "{due}", "o.due_at IS NOT NULL AND o.due_at <= {now} AND o.available_at <= {now}", 1) + `
ORDER BY seq LIMIT ?`)
	}
	confirm := rep.Replace(confirmSQL)
	q.confirmMySQL = strings.Replace(confirm, "{share}", shareSkipMySQL, 1)
	q.confirmMariaDB = strings.Replace(confirm, "{share}", shareSkipMariaDB, 1)
	return q
}

// confirmSQL confirms an ordered batch's scheduled rows (their seqs, a JSON
// array): it returns the ids of those still pending and due and not locked
// by a writer, a Reschedule whose transaction deleted or moved one before it
// came due and has not ended (the claim's read, without locks, could not see
// it). {share} is the server's shared locking read that skips locked rows.
// By the primary key, as bySeq says; in a statement of its own (autocommit),
// so its locks end with it.
const confirmSQL = `SELECT o.id FROM ` + bySeq + `
WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.available_at <= {now} {share}`

// Shared locking reads that skip locked rows: MySQL 8's FOR SHARE SKIP
// LOCKED (of the outbox's rows alone, not the JSON_TABLE's), which MariaDB
// does not parse (it has no FOR SHARE), and MariaDB's LOCK IN SHARE MODE
// SKIP LOCKED (10.6+), which MySQL does not accept (its LOCK IN SHARE MODE
// takes no SKIP LOCKED).
const (
	shareSkipMySQL   = `FOR SHARE OF o SKIP LOCKED`
	shareSkipMariaDB = `LOCK IN SHARE MODE SKIP LOCKED`
)

// scanClaimed reads a claimed row, then extra.
func scanClaimed(rows *sql.Rows, extra ...any) (store.Row, error) {
	var (
		c                 store.Row
		payload, metadata []byte
		occurred          any
	)
	dest := append([]any{&c.Seq, &c.ID, &c.Type, &c.Version, &c.AggregateType, &c.AggregateID, &c.Topic, &payload, &metadata,
		&occurred, &c.Attempts, &c.Strikes}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return c, err
	}
	c.Payload, c.Metadata = payload, metadata
	var err error
	c.OccurredAt, err = parseTime(occurred)
	return c, err
}

// claim runs the claim q and returns its rows.
func (r *relay) claim(ctx context.Context, x store.Execer, q string, args ...any) ([]store.Row, error) {
	return sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Row, error) { return scanClaimed(rows) })
}

// claimLocked claims up to limit due events in tx, locking them and skipping
// rows others locked; the locks hold until tx ends.
func (r *relay) claimLocked(ctx context.Context, tx store.Execer, limit int) ([]store.Row, error) {
	return r.claim(ctx, tx, r.claims.locked, limit)
}

// claimOrdered returns up to limit due events of the owned partitions, in
// insertion order, leaving out those behind an earlier event of their
// aggregate that waits for a retry. It reads without locks, then confirms
// the batch's scheduled events (confirm), and holds back those that a writer
// holds or changed with the later events of their aggregates
// (sqlkit.Confirm): the next claim reads them again.
func (r *relay) claimOrdered(ctx context.Context, x store.Execer, limit, partitions int, owned []int32) ([]store.Row, error) {
	if len(owned) == 0 {
		return nil, nil
	}
	via, err := r.blockersIndex(ctx, x)
	if err != nil {
		return nil, err
	}
	q, args := sqlkit.OrderedClaim(r.claims.ordered[via], limit, partitions, owned)
	rows, err := sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Row, error) {
		var sched bool
		c, err := scanClaimed(rows, &sched)
		c.Scheduled = sched
		return c, err
	})
	if err != nil || !slices.ContainsFunc(rows, func(c store.Row) bool { return c.Scheduled }) {
		return rows, err
	}
	confirm, err := r.confirm(ctx, x)
	if err != nil {
		return nil, err
	}
	return sqlkit.Confirm(ctx, x, rows, func(sched []store.Row) (string, []any) {
		seqs := make([]int64, len(sched))
		for i, c := range sched {
			seqs[i] = c.Seq
		}
		return confirm, []any{sqlkit.JSONInts(seqs)}
	})
}

// The servers whose SQL the confirmation tells apart (relay.server).
const (
	serverMySQL = 1 + iota
	serverMariaDB
)

// confirm returns the confirmation of an ordered batch's scheduled rows in
// the server's SQL (confirmSQL), asking the server which it is the first
// time.
func (r *relay) confirm(ctx context.Context, x store.Execer) (string, error) {
	if r.server.Load() == 0 {
		var version string
		if err := sqlkit.QueryRow(ctx, x, `SELECT VERSION()`, nil, &version); err != nil {
			return "", fmt.Errorf("server version: %w", err)
		}
		server := int32(serverMySQL)
		if strings.Contains(strings.ToLower(version), "mariadb") {
			server = serverMariaDB
		}
		r.server.Store(server)
	}
	if r.server.Load() == serverMariaDB {
		return r.claims.confirmMariaDB, nil
	}
	return r.claims.confirmMySQL, nil
}
