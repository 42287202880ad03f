package sqlite

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// blockersIdx is the index of migration 0009_blockers_idx on the outbox.
func (e *claimsEnv) blockersIdx() string { return e.tbl.Derived("_blockers_idx").Quoted() }

// indexed is how many rows of the outbox the index idx holds.
func (e *claimsEnv) indexed(idx string) int64 {
	e.t.Helper()
	// A partial index serves only a query with its condition's terms.
	return e.int(`SELECT count(*) FROM ` + e.tbl.Quoted() + ` AS b INDEXED BY ` + idx + `
WHERE b.processed_at IS NULL AND b.dead_at IS NULL AND ` + blocker)
}

// plans is SQLite's plan of q with args, its details joined by "; ".
func (e *claimsEnv) plans(q string, args ...any) string {
	e.t.Helper()
	rows, err := e.db.QueryContext(e.ctx, `EXPLAIN QUERY PLAN `+q, args...)
	e.must(err)
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var (
			id, parent, unused int
			detail             string
		)
		e.must(rows.Scan(&id, &parent, &unused, &detail))
		out = append(out, detail)
	}
	e.must(rows.Err())
	return strings.Join(out, "; ")
}

// The blockers index holds the retries and the scheduled events, the only
// events that can be pending and not due, and no other: an event published
// at its first attempt is in no aggregate index. The ordered claim's lookup
// of what holds a candidate back, and the oldest unheld age's, go through it.
func TestBlockersIndex(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	e.must(e.r.Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true}))
	if n := e.int(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, e.tbl.Derived("_aggregate_idx").Name); n != 0 {
		t.Fatalf("the aggregate index of 0002_relay is still there next to the blockers index")
	}
	plain := e.plain(3)
	e.insert(event(store.Schedule{After: time.Hour}))
	if n := e.indexed(e.blockersIdx()); n != 1 {
		t.Fatalf("blockers index holds %d rows with 3 plain events and 1 scheduled, want 1", n)
	}
	// A failed attempt puts its event in.
	b := e.batch(e.db, 10, time.Minute)
	var fs []store.Failure
	for _, c := range b.Rows() {
		if c.ID == plain[0] {
			fs = append(fs, store.Failure{ID: c.ID, Err: "boom", Delay: time.Hour})
		}
	}
	if len(fs) != 1 {
		t.Fatalf("claimed %d rows, not the first plain event", len(b.Rows()))
	}
	_, err := b.MarkFailed(e.ctx, fs)
	e.must(err)
	e.must(b.Commit(e.ctx))
	if n := e.indexed(e.blockersIdx()); n != 2 {
		t.Fatalf("blockers index holds %d rows after a failure, want 2 (the retry, the scheduled event)", n)
	}

	idx := string(e.tbl.Derived("_blockers_idx").Name)
	q, args := sqlkit.OrderedClaim(e.r.claims.ordered, 100, 4, []int32{0, 1, 2, 3})
	if p := e.plans(q, args...); !strings.Contains(p, idx) {
		t.Errorf("the ordered claim does not look up what holds a candidate back through %s: %s", idx, p)
	}
	if p := e.plans(e.r.unheld, 10); !strings.Contains(p, idx) {
		t.Errorf("the oldest unheld age does not look up what holds an event back through %s: %s", idx, p)
	}
}

// On an outbox made before 0009_blockers_idx, an ordered relay's Create
// leaves the aggregate index (replacing it is the migration's: the relay
// never drops what it did not make in that call) and the ordered claims go
// through it; after the migration, through the blockers index. Either way an
// aggregate's events are held back behind its retry, and released once the
// retry is due.
func TestBlockersIndexOnAnExistingOutbox(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	file := e.migration
	indexes := func(aggregate, blockers int64) {
		t.Helper()
		for idx, want := range map[string]int64{"_aggregate_idx": aggregate, "_blockers_idx": blockers} {
			if n := e.int(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, e.tbl.Derived(idx).Name); n != want {
				t.Fatalf("%d indexes %s, want %d", n, e.tbl.Derived(idx).Name, want)
			}
		}
	}
	e.must(e.r.Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true}))
	indexes(0, 1)
	e.exec(file("0009_blockers_idx.down.sql"))
	indexes(1, 0)
	e.must(newRelay(e.tbl).Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true, Check: true}))
	indexes(1, 0)

	// One aggregate's three events; the first fails, and holds the others
	// back while its retry waits.
	evs := []store.Row{event(store.Schedule{}), event(store.Schedule{}), event(store.Schedule{})}
	for i := range evs {
		evs[i].AggregateID = "a-1"
	}
	e.insert(evs...)
	claim := func(limit int) store.Batch {
		t.Helper()
		b, err := e.r.Claim(e.ctx, e.db, store.ClaimParams{Limit: limit, Ordered: &store.OrderedClaim{Partitions: 4, Owned: []int32{0, 1, 2, 3}}})
		e.must(err)
		t.Cleanup(b.Close)
		return b
	}
	b := claim(1)
	if len(b.Rows()) != 1 || b.Rows()[0].ID != evs[0].ID {
		t.Fatalf("first ordered claim = %v, want the aggregate's first event", rowIDs(b.Rows()))
	}
	_, err := b.MarkFailed(e.ctx, []store.Failure{{ID: evs[0].ID, Err: "boom", Delay: time.Hour}})
	e.must(err)
	e.must(b.Commit(e.ctx))
	if got := claim(10).Rows(); len(got) != 0 {
		t.Fatalf("ordered claim behind a waiting retry, through the aggregate index = %v, want nothing", rowIDs(got))
	}
	e.exec(file("0009_blockers_idx.up.sql"))
	indexes(0, 1)
	if got := claim(10).Rows(); len(got) != 0 {
		t.Fatalf("ordered claim behind a waiting retry, through the blockers index = %v, want nothing", rowIDs(got))
	}
	e.exec(`UPDATE `+e.tbl.Quoted()+` SET available_at = 0 WHERE id = ?`, evs[0].ID) // the retry is due
	if got := rowIDs(claim(10).Rows()); len(got) != 3 || got[0] != evs[0].ID || got[1] != evs[1].ID || got[2] != evs[2].ID {
		t.Fatalf("ordered claim once the retry is due = %v, want the three in order", got)
	}
}

// An event that is neither scheduled nor a retry is due from its insert:
// one whose available_at lies ahead of the clock (the clock stepped back
// since its insert) is claimed in its aggregate's order, before the later
// event written after the step, not left behind while that one goes first
// (the blockers index holds neither).
func TestOrderedClaimAfterTheClockSteppedBack(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	e.must(e.r.Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true}))
	evs := []store.Row{event(store.Schedule{}), event(store.Schedule{})}
	for i := range evs {
		evs[i].AggregateID = "a-1"
	}
	e.insert(evs[0])
	e.exec(`UPDATE `+e.tbl.Quoted()+` SET available_at = available_at + 3600000000 WHERE id = ?`, evs[0].ID) // written an hour "later"
	e.insert(evs[1])
	b, err := e.r.Claim(e.ctx, e.db, store.ClaimParams{Limit: 10, Ordered: &store.OrderedClaim{Partitions: 4, Owned: []int32{0, 1, 2, 3}}})
	e.must(err)
	defer b.Close()
	if got := rowIDs(b.Rows()); len(got) != 2 || got[0] != evs[0].ID || got[1] != evs[1].ID {
		t.Fatalf("ordered claim = %v, want both events of the aggregate in order %v", got, rowIDs(evs))
	}
}
