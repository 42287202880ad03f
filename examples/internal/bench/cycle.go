package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/heraldgo/herald/relay"
)

// The ordered relay's cycle on MySQL/MariaDB statement by statement
// (relay -explain-cycle): ANALYZE FORMAT=JSON (MySQL: EXPLAIN ANALYZE) of
// each statement of one cycle in the middle of a burn-down, and of the SQL
// reference's two on the same outbox, with what each read and how long it
// took: what a batch costs in each.

// seqsJSON matches the JSON array of seqs the MySQL marks pass (JSON_TABLE).
var seqsJSON = regexp.MustCompile(`^\[[0-9,]*\]$`)

// explainCycle loads n events, lets an ordered relay (one worker) publish
// half of them through the capturing driver, then asks the database for the
// plan of each statement of the relay's last whole cycle, run again on the
// outbox as it is now: the claim as the relay sent it (which claims the next
// batch: MySQL's ordered claim has no position), and the marks with that
// batch's seqs; then the SQL reference's claim and DELETE. Each runs in a
// transaction rolled back, the marks and the reference at READ COMMITTED
// (the relay's isolation).
func explainCycle(bdb benchDB, n int) error {
	if bdb.name != "mysql" {
		return errors.New("-explain-cycle: MySQL/MariaDB only")
	}
	dsn, drop, err := bdb.scratch()
	if err != nil {
		return err
	}
	defer drop()
	db, err := bdb.open(dsn)
	if err != nil {
		return err
	}
	err = setupRelay(db, true)
	if err == nil {
		err = loadOutbox(db, n, "bench.cycle")
	}
	if err == nil {
		err = settleLoad(db)
	}
	closeGorm(db)
	if err != nil {
		return err
	}
	log, err := captureRelay(bdb, dsn, relay.Config{Ordered: true, Workers: 1}, n/2)
	if err != nil {
		return err
	}
	cycle := lastCycle(log)
	if cycle == nil {
		return errors.New("-explain-cycle: no whole cycle captured")
	}
	edb, err := bdb.open(dsn)
	if err != nil {
		return err
	}
	defer closeGorm(edb)
	sqlDB, err := edb.DB()
	if err != nil {
		return err
	}
	ctx := context.Background()
	// The next batch: what the claim returns now, by seq.
	seqs, err := claimedSeqs(ctx, sqlDB, cycle[0])
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	next, err := json.Marshal(seqs)
	if err != nil {
		return err
	}
	fmt.Printf("### The ordered relay's cycle on %s, %d events of %d published, the next batch %d events\n\n", bdb.name, n/2, n, len(seqs))
	rc := &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	for i, c := range cycle {
		args := make([]any, len(c.args))
		for j, a := range c.args {
			args[j] = a.Value
			if s, ok := a.Value.(string); ok && seqsJSON.MatchString(s) {
				args[j] = string(next)
			}
		}
		opts := rc
		if i == 0 {
			opts = nil // the claim: autocommit, the server's isolation
		}
		explainPrint(sqlDB, bdb.name, opts, "relay", c.query, args)
	}
	ref := referenceStatements(seqs)
	for _, q := range ref {
		explainPrint(sqlDB, bdb.name, rc, "SQL reference", q.query, q.args)
	}
	return nil
}

// explainPrint prints the plan of query with args, as run by who.
func explainPrint(db *sql.DB, dbName string, opts *sql.TxOptions, who, query string, args []any) {
	plan, err := explainIn(db, dbName, opts, query, args)
	if err != nil {
		plan = "explain failed: " + err.Error()
	}
	fmt.Printf("#### %s\n\n```sql\n%s\n```\n\narguments %v:\n\n```\n%s\n```\n\n", who, query, shortArgs(args), plan)
}

// lastCycle is the last whole cycle of log: a claim and the statements
// after it up to its marks (a DELETE). BEGIN, COMMIT and the isolation's SET
// are left out.
func lastCycle(log []captured) []captured {
	var cycles [][]captured
	for _, c := range log {
		q := strings.TrimSpace(c.query)
		switch {
		case isClaim(q):
			cycles = append(cycles, []captured{c})
		case len(cycles) == 0, strings.HasPrefix(q, "SET "), q == "COMMIT", q == "BEGIN":
		default:
			cycles[len(cycles)-1] = append(cycles[len(cycles)-1], c)
		}
	}
	for i := len(cycles) - 1; i >= 0; i-- {
		for j, c := range cycles[i][1:] {
			if strings.HasPrefix(strings.TrimSpace(c.query), "DELETE") {
				return cycles[i][:j+2] // what follows the marks is the relay's (its stop, a beat)
			}
		}
	}
	return nil
}

// isClaim reports whether q claims due events (claimStatements' test).
func isClaim(q string) bool {
	return strings.Contains(q, "available_at <=") && !strings.HasPrefix(q, "DELETE") && !strings.HasPrefix(q, "EXPLAIN")
}

// claimedSeqs runs the claim c and returns the seqs of the rows it returns
// (their first column).
func claimedSeqs(ctx context.Context, db *sql.DB, c captured) ([]int64, error) {
	args := make([]any, len(c.args))
	for i, a := range c.args {
		args[i] = a.Value
	}
	rows, err := db.QueryContext(ctx, c.query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []int64
	for rows.Next() {
		dest := make([]any, len(cols))
		var seq int64
		dest[0] = &seq
		for i := 1; i < len(dest); i++ {
			dest[i] = new(sql.RawBytes)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, seq)
	}
	return out, rows.Err()
}

// referenceStatement is a statement of the SQL reference, with its
// arguments.
type referenceStatement struct {
	query string
	args  []any
}

// referenceStatements are the SQL reference's claim and DELETE on MySQL
// (mysqlClaimDelete), the DELETE of seqs.
func referenceStatements(seqs []int64) []referenceStatement {
	args := make([]any, len(seqs))
	for i, s := range seqs {
		args[i] = s
	}
	return []referenceStatement{
		{query: mysqlReferenceClaim},
		{query: mysqlReferenceDelete(len(seqs)), args: args},
	}
}
