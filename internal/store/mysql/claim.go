package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

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

func (r *relay) claim(ctx context.Context, x store.Execer, q string, args ...any) ([]store.Row, error) {
	return sqlkit.Collect(ctx, x, q, args, func(rows *sql.Rows) (store.Row, error) { return scanClaimed(rows) })
}

// claimLocked claims up to limit due events in tx, locking them and skipping
// rows others locked; the locks hold until tx ends.
func (r *relay) claimLocked(ctx context.Context, tx store.Execer, limit int) ([]store.Row, error) {
	return r.claim(ctx, tx, r.q.claimLocked, limit)
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
	q := strings.ReplaceAll(r.q.claimOrdered, "{owned}", sqlkit.Placeholders(len(owned)))
	branch := append(append([]any{partitions}, sqlkit.Anys(owned)...), limit)
	args := append(append(append([]any{}, branch...), branch...), limit)
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
	return r.q.confirm[r.server.Load()-1], nil
}
