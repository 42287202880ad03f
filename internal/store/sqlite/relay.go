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

// blocker is the condition of the blockers index (0009_blockers_idx) on the
// outbox row b: an event that can be pending and not due, a retry or a
// scheduled event. The statements that look up the events holding an
// aggregate back state it as the index does, so that SQLite uses the index
// (a partial index serves a query whose WHERE has its condition's terms).
const blocker = `(b.attempts > 0 OR b.due_at IS NOT NULL)`

const claimCols = `id, type, version, aggregate_type, aggregate_id, topic, payload, metadata, occurred_at, attempts, strikes`

// Marks find their rows by seq, the rowid, and are fenced: by the batch's
// claim (byClaim: its row in the claims table, which a later claim deletes
// once it expired, and the batch's commit), or in ordered mode by the
// partition leases of the batch (the row's partition still leased to this
// instance under the generation it took). SQLite has one writer: no claim or
// Acquire runs between the check and the write.
const (
	bySeq   = `seq IN (SELECT value FROM json_each(?))`
	byClaim = `EXISTS (SELECT 1 FROM {claims} WHERE claim = ?)`
	fenced  = `part_key % ? IN (SELECT l.partition FROM {leases} l JOIN json_each(?) f
    ON l.partition = json_extract(f.value, '$[0]') AND l.generation = json_extract(f.value, '$[1]')
  WHERE l.owner = ?)`
)

// relay is store.Relay on SQLite. Each statement is built once, here, from
// the SQL kept in the file of its concern, beside the code that runs it (the
// map is in package store's doc); this file holds the pieces of SQL they
// share.
type relay struct {
	sqlkit.Unpositioned // no claim position, no partitions
	t                   ident.Table
	claims              claimQueries    // claim.go
	marks               markQueries     // mark.go
	recovery            recoveryQueries // recovery.go
	stats, unheld       string          // stats.go: statsSQL, unheldSQL
	nextDue             string          // schedule.go: nextDueSQL
	requeues            requeueQueries  // admin.go
	cleanup             string          // cleanup.go: cleanupSQL
	leases              leases
}

// newRelay returns the relay of the outbox t, its statements built once.
func newRelay(t ident.Table) *relay {
	lt, ct := t.Derived("_leases").Quoted(), t.Derived("_claims").Quoted()
	rep := strings.NewReplacer("{set}", requeueSet, "{t}", t.Quoted(), "{cols}", claimCols, "{pending}", pending, "{now}", Now, "{since}", pendingSince,
		"{leases}", lt, "{claims}", ct, "{blocker}", blocker)
	return &relay{
		t:        t,
		claims:   newClaimQueries(rep),
		marks:    newMarkQueries(rep),
		recovery: newRecoveryQueries(rep),
		stats:    rep.Replace(statsSQL),
		unheld:   rep.Replace(unheldSQL),
		nextDue:  rep.Replace(nextDueSQL),
		requeues: newRequeueQueries(rep),
		cleanup:  rep.Replace(cleanupSQL),
		leases:   newLeases(t),
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
