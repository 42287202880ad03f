package mysql

import (
	"context"
	"fmt"
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

// fenced joins each row (o) to its partition's lease while the lease is
// still this instance's under the generation the batch holds (the fence, a
// JSON array of [partition, generation] pairs): the fence of the marks and
// of RecoverOutage in ordered mode (mark.go says how the marks use it).
const fenced = ` STRAIGHT_JOIN {leases} AS l ON l.` + "`partition`" + ` = {part} AND l.owner = ?
STRAIGHT_JOIN JSON_TABLE(?, '$[*]' COLUMNS (p INT PATH '$[0]', g BIGINT PATH '$[1]')) AS f ON f.p = l.` + "`partition`" + ` AND f.g = l.generation`

// relay is store.Relay on MySQL and MariaDB. Each statement is built once,
// here, from the SQL kept in the file of its concern, beside the code that
// runs it (the map is in package store's doc); this file holds the pieces of
// SQL they share.
type relay struct {
	sqlkit.Unpositioned // no claim position, no partitions
	t                   ident.Table
	claims              claimQueries    // claim.go
	marks               markQueries     // mark.go
	recovery            recoveryQueries // recovery.go
	stats               string          // stats.go: statsSQL
	unheld              [2]string       // stats.go: unheldSQL, by [blockers index]
	scheduled, nextDue  string          // schedule.go: scheduledStatsSQL, nextDueSQL
	requeues            requeueQueries  // admin.go
	cleanup             string          // cleanup.go: cleanupSQL
	leases              leases
	// server is what the confirmation learnt the server is: 0 not yet,
	// else serverMySQL or serverMariaDB.
	server atomic.Int32
	// blockers is whether the outbox has the blockers index
	// (0009_blockers_idx), looked up at the first ordered claim or unheld
	// age: 0 not yet, else 1 + blockersIndex's answer.
	blockers atomic.Int32
}

// blockersIndex returns 1 when the outbox has the blockers index
// (0009_blockers_idx), through which ordered claims and the unheld age look
// up what holds an aggregate back, else 0 (an outbox made before it, where
// they use 0002's aggregate index). It asks the catalog the first time: an
// outbox migrated while the relay runs is seen at its next start.
func (r *relay) blockersIndex(ctx context.Context, x store.Execer) (int, error) {
	if v := r.blockers.Load(); v != 0 {
		return int(v - 1), nil
	}
	ok, err := objectExists(ctx, x, store.Object{Kind: store.KindIndex, Name: ident.Table{Name: r.t.Derived("_blockers_idx").Name}, On: r.t})
	if err != nil {
		return 0, fmt.Errorf("look up the blockers index: %w", err)
	}
	v := 0
	if ok {
		v = 1
	}
	r.blockers.Store(int32(v + 1))
	return v, nil
}

// byAggregate is how a lookup of rows a of the aggregate of row o begins
// (after its FROM), by [blockers index]: through 0002's aggregate index,
// which holds every event, or through the blockers index of
// 0009_blockers_idx, which keys only the retries and scheduled events (the
// events that can hold their aggregate back; every other event's key is
// NULL).
func byAggregate(a, o string) [2]string {
	return [2]string{`
      WHERE ` + a + `.aggregate_type = ` + o + `.aggregate_type AND ` + a + `.aggregate_id = ` + o + `.aggregate_id`, ` FORCE INDEX ({blockersIdx})
      WHERE ` + a + `.blocker_type = ` + o + `.aggregate_type AND ` + a + `.blocker_id = ` + o + `.aggregate_id`}
}

// newRelay returns the relay of the outbox t, its statements built once.
func newRelay(t ident.Table) *relay {
	rep := strings.NewReplacer("{set}", requeueSet, "{t}", Quote(t), "{cols}", claimCols, "{pending}", pending, "{now}", Now, "{since}", pendingSince, "{part}", partitionExpr,
		"{leases}", Quote(t.Derived("_leases")), "{blockersIdx}", Quote(ident.Table{Name: t.Derived("_blockers_idx").Name}))
	return &relay{
		t:         t,
		claims:    newClaimQueries(t, rep),
		marks:     newMarkQueries(rep),
		recovery:  newRecoveryQueries(rep),
		stats:     rep.Replace(statsSQL),
		unheld:    newUnheldQueries(rep),
		scheduled: rep.Replace(scheduledStatsSQL),
		nextDue:   rep.Replace(nextDueSQL),
		requeues:  newRequeueQueries(rep),
		cleanup:   rep.Replace(cleanupSQL),
		leases:    newLeases(t),
	}
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
