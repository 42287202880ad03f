package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// claimsEnv is an outbox in a file of its own, with the unordered relay's
// claims table.
type claimsEnv struct {
	*schedEnv
	path string
}

func newClaimsEnv(t *testing.T) *claimsEnv {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.db")
	db := openFile(t, path)
	e := &claimsEnv{schedEnv: &schedEnv{t: t, ctx: context.Background(), db: db, tbl: ident.MustTable(store.DefaultOutbox)}, path: path}
	e.o, e.r = newOutbox(e.tbl), newRelay(e.tbl)
	e.must(e.o.Create(e.ctx, db))
	e.must(e.r.Create(e.ctx, db, store.RelayCreateParams{}))
	return e
}

// openFile opens the SQLite file path as Herald asks (DSN).
func openFile(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", DSN(path)+"&_pragma=synchronous(NORMAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// plain inserts n events due at once and returns their ids in order.
func (e *claimsEnv) plain(n int) []string {
	e.t.Helper()
	evs := make([]store.Row, n)
	ids := make([]string, n)
	for i := range evs {
		evs[i] = event(store.Schedule{})
		ids[i] = evs[i].ID
	}
	e.insert(evs...)
	return ids
}

// batch claims up to limit events unordered for hold.
func (e *claimsEnv) batch(db *sql.DB, limit int, hold time.Duration) store.Batch {
	e.t.Helper()
	b, err := e.r.Claim(e.ctx, db, store.ClaimParams{Limit: limit, Hold: hold})
	e.must(err)
	return b
}

func (e *claimsEnv) int(q string, args ...any) int64 {
	e.t.Helper()
	var n int64
	e.must(e.db.QueryRowContext(e.ctx, q, args...).Scan(&n))
	return n
}

// availableAt is the sum of the outbox rows' available_at, and their count.
func (e *claimsEnv) availableAt() (sum, n int64) {
	e.t.Helper()
	e.must(e.db.QueryRowContext(e.ctx, `SELECT coalesce(sum(available_at), 0), count(*) FROM `+e.tbl.Quoted()).Scan(&sum, &n))
	return sum, n
}

func (e *claimsEnv) claimRows() int64 {
	return e.int(`SELECT count(*) FROM ` + e.tbl.Derived("_claims").Quoted())
}

func rowIDs(rows []store.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// An unordered claim writes one claims row and leaves the events' rows as
// they were; a second claim takes only what the first does not hold; the
// commit deletes the claim row, and gives back at once, as they were, the
// rows the batch neither published nor failed.
func TestClaimWritesOneRow(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	ids := e.plain(6)
	sum, _ := e.availableAt()
	b := e.batch(e.db, 4, time.Minute)
	if got := rowIDs(b.Rows()); fmt.Sprint(got) != fmt.Sprint(ids[:4]) {
		t.Fatalf("claimed %v, want %v", got, ids[:4])
	}
	if n := e.claimRows(); n != 1 {
		t.Fatalf("%d claim rows after a claim, want 1", n)
	}
	if after, _ := e.availableAt(); after != sum {
		t.Fatal("the claim moved available_at")
	}
	other := e.batch(e.db, 10, time.Minute)
	if got := rowIDs(other.Rows()); fmt.Sprint(got) != fmt.Sprint(ids[4:]) {
		t.Fatalf("second claim took %v, want %v", got, ids[4:])
	}
	e.must(other.Commit(e.ctx)) // nothing marked: both given back at once
	back := e.batch(e.db, 10, time.Minute)
	if got := rowIDs(back.Rows()); fmt.Sprint(got) != fmt.Sprint(ids[4:]) {
		t.Fatalf("claim beside the first batch took %v, want %v", got, ids[4:])
	}
	e.must(back.Commit(e.ctx))

	e.must(b.MarkPublished(e.ctx, ids[:1]))
	_, err := b.MarkFailed(e.ctx, []store.Failure{{ID: ids[1], Err: "refused", Strike: true, Delay: time.Hour}})
	e.must(err)
	e.must(b.Commit(e.ctx))
	if n := e.claimRows(); n != 0 {
		t.Fatalf("%d claim rows after the commits, want 0", n)
	}
	again := e.batch(e.db, 10, time.Minute)
	want := []string{ids[2], ids[3], ids[4], ids[5]}
	if got := rowIDs(again.Rows()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed after the commit %v, want %v", got, want)
	}
	again.Close()
	if d := e.int(`SELECT available_at - `+Now+` FROM `+e.tbl.Quoted()+` WHERE id = ?`, ids[1]); d < (50 * time.Minute).Microseconds() {
		t.Fatalf("the failed row is due in %v, want its retry's hour", time.Duration(d)*time.Microsecond)
	}
}

// A batch that ran past its hold: a later claim deletes its claim row and
// takes its rows; the late batch's marks change nothing and its commit gives
// back nothing of the new holder's; a batch closed without its commit (a
// relay that died) leaves its rows held until the claim expires.
func TestClaimExpires(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	ids := e.plain(3)
	late := e.batch(e.db, 10, 20*time.Millisecond)
	if len(late.Rows()) != 3 {
		t.Fatalf("claimed %d, want 3", len(late.Rows()))
	}
	time.Sleep(100 * time.Millisecond)
	taken := e.batch(e.db, 10, time.Minute)
	if got := rowIDs(taken.Rows()); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("claim after the hold took %v, want %v", got, ids)
	}
	if taken.Rows()[0].Lease == late.Rows()[0].Lease {
		t.Fatal("the new claim has the expired claim's token")
	}
	e.must(late.MarkPublished(e.ctx, ids[:1]))
	_, err := late.MarkFailed(e.ctx, []store.Failure{{ID: ids[1], Err: "late", Strike: true, Dead: true}})
	e.must(err)
	e.must(late.Commit(e.ctx))
	if n := e.int(`SELECT count(*) FROM ` + e.tbl.Quoted() + ` WHERE attempts = 0 AND dead_at IS NULL`); n != 3 {
		t.Fatalf("the late batch's marks changed rows: %d of 3 untouched", n)
	}
	if nothing := e.batch(e.db, 10, time.Minute); len(nothing.Rows()) != 0 {
		t.Fatalf("the late batch gave back %d rows another batch holds", len(nothing.Rows()))
	}
	e.must(taken.MarkPublished(e.ctx, ids))
	e.must(taken.Commit(e.ctx))
	if n := e.int(`SELECT count(*) FROM ` + e.tbl.Quoted()); n != 0 {
		t.Fatalf("%d rows after the holder's marks, want 0", n)
	}

	ids = e.plain(2)
	dead := e.batch(e.db, 10, 300*time.Millisecond)
	dead.Close()
	if n := len(e.batch(e.db, 10, time.Minute).Rows()); n != 0 {
		t.Fatalf("a claim took %d rows of a closed batch before its hold ended", n)
	}
	time.Sleep(400 * time.Millisecond)
	back := e.batch(e.db, 10, time.Minute)
	if got := rowIDs(back.Rows()); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("after the hold: %v, want %v", got, ids)
	}
	if n := e.claimRows(); n != 1 {
		t.Fatalf("%d claim rows, want the live one", n)
	}
}

// Relays of two processes (two pools) on one file, claiming all at once,
// never claim an event twice.
func TestClaimsOfTwoPoolsDisjoint(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	const n = 2000
	e.plain(n)
	pools := []*sql.DB{e.db, openFile(t, e.path)}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
		errs = make(chan error, 8)
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := pools[w%2]
			for {
				b, err := e.r.Claim(e.ctx, db, store.ClaimParams{Limit: 37, Hold: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				rows := b.Rows()
				if len(rows) == 0 {
					b.Close()
					return
				}
				mu.Lock()
				for _, r := range rows {
					seen[r.ID]++
				}
				mu.Unlock()
				if err := b.MarkPublished(e.ctx, rowIDs(rows)); err != nil {
					errs <- err
					return
				}
				if err := b.Commit(e.ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("%d events claimed, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("event %s claimed %d times", id, k)
		}
	}
	if left := e.int(`SELECT count(*) FROM ` + e.tbl.Quoted()); left != 0 {
		t.Fatalf("%d rows left", left)
	}
}

// On an outbox made before the claims table (migration 0008), a relay's
// Check names the migration (in either mode: a relay may change modes) and
// its Create makes the table.
func TestClaimsTableOnAnExistingOutbox(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	e.plain(1)
	e.must(e.r.Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true}))
	e.exec(`DROP TABLE ` + e.tbl.Derived("_claims").Quoted())
	for _, ordered := range []bool{true, false} {
		err := e.r.Check(e.ctx, e.db, store.RelayCheckParams{Ordered: ordered})
		if !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), "0008_claims") {
			t.Fatalf("Check (ordered %v) without the claims table = %v, want ErrSchemaOutdated naming 0008_claims", ordered, err)
		}
	}
	e.must(e.r.Create(e.ctx, e.db, store.RelayCreateParams{Check: true}))
	e.must(e.r.Check(e.ctx, e.db, store.RelayCheckParams{}))
	b := e.batch(e.db, 10, time.Minute)
	if len(b.Rows()) != 1 {
		t.Fatalf("claimed %d, want 1", len(b.Rows()))
	}
	e.must(b.MarkPublished(e.ctx, rowIDs(b.Rows())))
	e.must(b.Commit(e.ctx))
}
