package postgres

// The claim-position state machine (position.go) on a fake clock, without a
// database: each test feeds it what the claims and marks would report and
// checks where the next claim starts.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// fakeClock is this process's clock, moved by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

var (
	local0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	// db0 is the database's clock at local0: 5 s ahead of this process's.
	db0 = local0.Add(5 * time.Second)
)

func newTestPosition() (*position, *fakeClock) {
	c := &fakeClock{t: local0}
	return newPosition(c.now), c
}

func valid(t time.Time) sql.NullTime { return sql.NullTime{Time: t, Valid: true} }

// at is a database time d after db0.
func at(d time.Duration) time.Time { return db0.Add(d) }

// lowKey is the lowest key at t, where a clean claim leaves the position.
func lowKey(t time.Time) key { return key{t, nilUUID} }

func wantFrom(t *testing.T, st unorderedClaim, want *key) {
	t.Helper()
	switch {
	case want == nil && st.from != nil:
		t.Fatalf("claim starts at %v; want the head", *st.from)
	case want != nil && st.from == nil:
		t.Fatalf("claim starts at the head; want %v", *want)
	case want != nil && (!st.from.at.Equal(want.at) || st.from.id != want.id):
		t.Fatalf("claim starts at %v; want %v", *st.from, *want)
	}
}

// known gives p an unordered position at k, with a frontier at f (after k).
func known(t *testing.T, p *position, c *fakeClock, k key, f time.Time) {
	t.Helper()
	st := p.unorderedStart(false)
	p.unorderedDone(st, false, key{}, false, f, valid(f)) // learns the frontier
	c.advance(frontierEvery)
	st = p.unorderedStart(false)
	p.unorderedDone(st, false, k, true, f, sql.NullTime{}) // full: at its last row
	if !p.known || p.at != k {
		t.Fatalf("setup: position %v (known %v); want %v", p.at, p.known, k)
	}
}

func TestPositionKeyOrder(t *testing.T) {
	t.Parallel()
	a, b := key{at(0), "00000000-0000-0000-0000-000000000002"}, key{at(0), "00000000-0000-0000-0000-000000000010"}
	if !a.less(b) || b.less(a) || a.less(a) {
		t.Fatal("same time: want ordered by id")
	}
	if c := (key{at(time.Microsecond), nilUUID}); !b.less(c) || c.less(b) {
		t.Fatal("want ordered by time first")
	}
}

// The first claim reads no frontier, the second does; then one claim every
// frontierEvery does, by this process's clock, in either mode.
func TestPositionFrontierReadEvery(t *testing.T) {
	t.Parallel()
	p, c := newTestPosition()
	if st := p.unorderedStart(false); st.check {
		t.Fatal("first claim: want no frontier read (it starts at the head, and no read moves the position after it)")
	}
	if st := p.unorderedStart(false); !st.check {
		t.Fatal("second claim: want it to read the frontier")
	}
	c.advance(frontierEvery - time.Millisecond)
	if st := p.unorderedStart(false); st.check {
		t.Fatal("claim within frontierEvery of the last read: want no read")
	}
	if st := p.orderedStart(nil); st.check {
		t.Fatal("ordered claim within frontierEvery of the last read: want no read")
	}
	c.advance(time.Millisecond)
	if st := p.orderedStart(nil); !st.check {
		t.Fatal("ordered claim frontierEvery after the last read: want a read")
	}
	if st := p.unorderedStart(true); st.check {
		t.Fatal("sweep right after a read: want no read")
	}
	c.advance(frontierEvery)
	if st := p.unorderedStart(true); !st.check {
		t.Fatal("sweep frontierEvery after the last read: want a read")
	}
}

// Until a frontier is known before a claim begins, unordered claims start at
// the head and do not move the position.
func TestPositionUnorderedNoFrontierYet(t *testing.T) {
	t.Parallel()
	p, c := newTestPosition()
	st := p.unorderedStart(false)
	wantFrom(t, st, nil)
	if !st.frontier.IsZero() {
		t.Fatalf("frontier %v before any read; want zero", st.frontier)
	}
	p.unorderedDone(st, false, key{at(0), "a"}, true, at(0), sql.NullTime{})
	if p.known {
		t.Fatal("claim without a frontier moved the position")
	}
	// This claim reads the frontier: the next one knows it before it starts.
	p.unorderedDone(p.unorderedStart(false), false, key{}, false, at(0), valid(at(-time.Millisecond)))
	if p.known {
		t.Fatal("claim that learned the frontier only at its end moved the position")
	}
	c.advance(time.Millisecond)
	st = p.unorderedStart(false)
	wantFrom(t, st, nil)
	if !st.frontier.Equal(at(-time.Millisecond)) {
		t.Fatalf("claim's frontier %v; want the one read before it, %v", st.frontier, at(-time.Millisecond))
	}
	p.unorderedDone(st, false, key{}, false, at(time.Millisecond), sql.NullTime{})
	k := lowKey(at(-time.Millisecond))
	wantFrom(t, p.unorderedStart(false), &k)
}

// A clean batch moves the position forward: a batch that came back short to
// its time (every visible due row was claimed), a full one to its last row;
// never above the frontier known before the claim, nor its now().
func TestPositionUnorderedAdvance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		frontier time.Time // known before the claim
		dbNow    time.Time
		last     key
		full     bool
		want     key
	}{
		{"short batch: to the frontier", at(-time.Second), at(0), key{at(-2 * time.Second), "b"}, false, lowKey(at(-time.Second))},
		{"short batch, now before the frontier: to now", at(time.Second), at(0), key{}, false, lowKey(at(0))},
		{"full batch: to its last row", at(-time.Second), at(0), key{at(-2 * time.Second), "b"}, true, key{at(-2 * time.Second), "b"}},
		{"full batch past the frontier: to the frontier", at(-time.Second), at(0), key{at(-time.Millisecond), "b"}, true, lowKey(at(-time.Second))},
		{"full batch past now: to now", at(time.Second), at(0), key{at(500 * time.Millisecond), "b"}, true, lowKey(at(0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, c := newTestPosition()
			p.unorderedDone(p.unorderedStart(false), false, key{}, false, tc.frontier, valid(tc.frontier))
			c.advance(time.Millisecond)
			p.unorderedDone(p.unorderedStart(false), false, tc.last, tc.full, tc.dbNow, sql.NullTime{})
			wantFrom(t, p.unorderedStart(false), &tc.want)
		})
	}
}

// Claims never move the position back by themselves: a later claim whose
// bound is lower (a full batch ending below it) leaves it.
func TestPositionUnorderedNeverBackOnClean(t *testing.T) {
	t.Parallel()
	p, c := newTestPosition()
	k := key{at(-time.Second), "m"}
	known(t, p, c, k, at(0))
	p.unorderedDone(p.unorderedStart(false), false, key{at(-2 * time.Second), "a"}, true, at(0), sql.NullTime{})
	wantFrom(t, p.unorderedStart(false), &k)
	// A later claim moves it on, to the frontier it knew.
	p.unorderedDone(p.unorderedStart(false), false, key{}, false, at(time.Second), sql.NullTime{})
	want := lowKey(at(0))
	wantFrom(t, p.unorderedStart(false), &want)
}

// The frontier only moves forward: reads older than the last, and claims
// that did not read it, leave it.
func TestPositionFrontierOnlyForward(t *testing.T) {
	t.Parallel()
	p, _ := newTestPosition()
	p.advance(valid(at(0)))
	p.advance(valid(at(-time.Second)))
	p.advance(sql.NullTime{})
	if !p.frontier.Equal(at(0)) {
		t.Fatalf("frontier %v; want %v", p.frontier, at(0))
	}
	p.advance(valid(at(time.Second)))
	if !p.frontier.Equal(at(time.Second)) {
		t.Fatalf("frontier %v; want %v", p.frontier, at(time.Second))
	}
}

// A failure mark lowers the unordered position to the mark's time (its
// retries are due after it) and keeps the claims running meanwhile from
// moving it forward; they may still lower it.
func TestPositionUnorderedFailedMark(t *testing.T) {
	t.Parallel()
	t.Run("below the position: lowered", func(t *testing.T) {
		t.Parallel()
		p, c := newTestPosition()
		known(t, p, c, key{at(-time.Second), "m"}, at(0))
		p.failed([]store.Failure{{ID: "x", Delay: time.Minute}}, at(-3*time.Second), local0)
		want := lowKey(at(-3 * time.Second))
		wantFrom(t, p.unorderedStart(false), &want)
	})
	t.Run("above the position: left", func(t *testing.T) {
		t.Parallel()
		p, c := newTestPosition()
		k := key{at(-time.Second), "m"}
		known(t, p, c, k, at(0))
		p.failed([]store.Failure{{ID: "x"}}, at(time.Second), local0)
		wantFrom(t, p.unorderedStart(false), &k)
	})
	t.Run("claim in flight: does not move it forward", func(t *testing.T) {
		t.Parallel()
		p, c := newTestPosition()
		known(t, p, c, key{at(-time.Second), "m"}, at(0))
		st := p.unorderedStart(false)
		p.failed([]store.Failure{{ID: "x"}}, at(-2*time.Second), local0)
		p.unorderedDone(st, false, key{}, false, at(time.Second), sql.NullTime{}) // would go to at(0)
		want := lowKey(at(-2 * time.Second))
		wantFrom(t, p.unorderedStart(false), &want)
	})
	t.Run("claim in flight: may lower it", func(t *testing.T) {
		t.Parallel()
		p, c := newTestPosition()
		known(t, p, c, key{at(-time.Second), "m"}, at(0))
		st := p.unorderedStart(false)
		p.failed([]store.Failure{{ID: "x"}}, at(-2*time.Second), local0)
		low := key{at(-4 * time.Second), "b"}
		p.unorderedDone(st, false, low, true, at(time.Second), sql.NullTime{})
		wantFrom(t, p.unorderedStart(false), &low)
	})
	t.Run("with no position: still none", func(t *testing.T) {
		t.Parallel()
		p, _ := newTestPosition()
		p.failed([]store.Failure{{ID: "x"}}, at(0), local0)
		if p.known {
			t.Fatal("failure mark made a position")
		}
	})
}

// Rewind (after a batch whose marks may not have committed, or that left
// rows untried; requeues; outage recoveries; partitions changing hands):
// the next claims start at the head, and a claim that was running does not
// bring the position back.
func TestPositionUnorderedRewind(t *testing.T) {
	t.Parallel()
	p, c := newTestPosition()
	known(t, p, c, key{at(-time.Second), "m"}, at(0))
	st := p.unorderedStart(false)
	p.rewind()
	wantFrom(t, p.unorderedStart(false), nil)
	p.unorderedDone(st, false, key{}, false, at(time.Second), sql.NullTime{})
	if p.known {
		t.Fatal("claim begun before the rewind set a position after it")
	}
	// The frontier is kept: the next claim moves the position again.
	p.unorderedDone(p.unorderedStart(false), false, key{}, false, at(time.Second), sql.NullTime{})
	want := lowKey(at(0))
	wantFrom(t, p.unorderedStart(false), &want)
}

// The sweeping view claims from the head and leaves the position, but its
// frontier reads count.
func TestPositionUnorderedSweep(t *testing.T) {
	t.Parallel()
	p, c := newTestPosition()
	k := key{at(-time.Second), "m"}
	known(t, p, c, k, at(0))
	st := p.unorderedStart(true)
	wantFrom(t, st, nil)
	p.unorderedDone(st, true, key{at(5 * time.Second), "z"}, false, at(10*time.Second), valid(at(9*time.Second)))
	wantFrom(t, p.unorderedStart(false), &k)
	if !p.frontier.Equal(at(9 * time.Second)) {
		t.Fatalf("frontier %v after the sweep's read; want %v", p.frontier, at(9*time.Second))
	}
}

// The relay's leases share the relay's position; production reads time.Now.
func TestRelaySharesItsPosition(t *testing.T) {
	t.Parallel()
	r := newRelay(ident.MustTable("outbox_messages"))
	if r.pos.now == nil {
		t.Fatal("the relay's position has no clock")
	}
	if r.leases.pos != r.pos {
		t.Fatal("the leases do not share the relay's position: taking partitions over would not rewind it")
	}
}

// remembers reports whether p remembers a position.
func remembers(p *position) bool {
	return p.known || len(p.cur) != 0 || len(p.out) != 0 || len(p.waits) != 0
}

// remember gives p an unordered and an ordered position.
func remember(p *position) {
	p.at, p.known = key{at(0), "m"}, true
	p.cur[3] = 10
	p.out["x"] = seqPart{5, 3}
	p.waits[3] = []waiting{{seq: 5, due: at(0)}}
}

// A batch keeps the position where its marks leave it and forgets it when
// rows it claimed may still be pending below it: ended without its marks,
// rows untried in unordered mode (ordered claims keep what waits in their
// own positions), a failure not recorded, a commit that failed.
func TestBatchKeepsOrForgetsThePosition(t *testing.T) {
	t.Parallel()
	rows := []store.Row{{ID: "a"}, {ID: "b"}}
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		unordered bool
		settle    func(b *batch, tx *fakeTx) // marks, then Commit or Close
		forgets   bool
	}{
		{"every row marked", true, func(b *batch, _ *fakeTx) { mustMark(t, b, "a", "b"); _ = b.Commit(ctx) }, false},
		{"unordered, a row untried", true, func(b *batch, _ *fakeTx) { mustMark(t, b, "a"); _ = b.Commit(ctx) }, true},
		{"ordered, a row untried", false, func(b *batch, _ *fakeTx) { mustMark(t, b, "a"); _ = b.Commit(ctx) }, false},
		{"a failure not recorded", false, func(b *batch, _ *fakeTx) {
			mustMark(t, b, "a")
			if _, err := b.MarkFailed(ctx, []store.Failure{{ID: "b", Err: refusedText}}); err == nil {
				t.Fatal("the refused failure mark succeeded")
			}
			_ = b.Commit(ctx)
		}, true},
		{"a commit that failed", false, func(b *batch, tx *fakeTx) {
			mustMark(t, b, "a", "b")
			tx.commitErr = errors.New("connection lost")
			if b.Commit(ctx) == nil {
				t.Fatal("Commit hid the commit's error")
			}
		}, true},
		{"closed without its marks", true, func(b *batch, _ *fakeTx) { mustMark(t, b, "a", "b"); b.Close() }, true},
		{"closed after its commit", true, func(b *batch, _ *fakeTx) { mustMark(t, b, "a", "b"); _ = b.Commit(ctx); b.Close() }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRelay(ident.MustTable("outbox_messages"))
			remember(r.pos)
			tx := &fakeTx{}
			c.settle(&batch{r: r, Marks: sqlkit.NewMarks(fakeMarker{}, store.ClaimParams{}, nil, nil, tx, rows), unordered: c.unordered}, tx)
			if forgot := !remembers(r.pos); forgot != c.forgets {
				t.Fatalf("position forgotten: %v, want %v", forgot, c.forgets)
			}
		})
	}
}

// refusedText is a failure text fakeMarker refuses to record.
const refusedText = "refused"

// fakeMarker marks without a database, refusing failures whose text is
// refusedText.
type fakeMarker struct{}

func (fakeMarker) MarkPublished(context.Context, store.Execer, []sqlkit.Key, bool, *store.Fence) error {
	return nil
}

func (fakeMarker) MarkFailed(_ context.Context, _ store.Execer, fs []store.Failure, _ *store.Fence) (time.Time, error) {
	for _, f := range fs {
		if f.Err == refusedText {
			return time.Time{}, errors.New("the database refused the text")
		}
	}
	return time.Now(), nil
}

// fakeTx is a transaction that runs nothing; its Commit returns commitErr.
type fakeTx struct{ commitErr error }

func (*fakeTx) ExecContext(context.Context, string, ...any) (sql.Result, error) { return nil, nil }
func (*fakeTx) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errors.New("fakeTx: no queries")
}
func (tx *fakeTx) Commit() error { return tx.commitErr }
func (*fakeTx) Rollback() error  { return nil }

func mustMark(t *testing.T, b *batch, ids ...string) {
	t.Helper()
	if err := b.MarkPublished(context.Background(), ids); err != nil {
		t.Fatal(err)
	}
}

// claimed is an ordered claim's rows: id "e<seq>" for each seq, on part.
func claimed(part int32, seqs ...int64) ([]store.Row, []seqPart) {
	rows, sps := make([]store.Row, len(seqs)), make([]seqPart, len(seqs))
	for i, s := range seqs {
		rows[i], sps[i] = store.Row{ID: fmt.Sprintf("e%d", s)}, seqPart{s, part}
	}
	return rows, sps
}

func wantLo(t *testing.T, st orderedClaim, want int64) {
	t.Helper()
	if st.lo != want {
		t.Fatalf("ordered claim starts at seq %d; want %d (0: the head)", st.lo, want)
	}
}

func wantCur(t *testing.T, p *position, part int32, want int64, ok bool) {
	t.Helper()
	c, has := p.cur[part]
	switch {
	case !ok && has:
		t.Fatalf("partition %d at %d; want at the head", part, c)
	case ok && !has:
		t.Fatalf("partition %d at the head; want %d", part, want)
	case ok && c != want:
		t.Fatalf("partition %d at %d; want %d", part, c, want)
	}
}

// settle gives p a settled seq: a claim observes it at clock, and a frontier
// after that clock settles it.
func settle(p *position, seq int64, clock time.Time) {
	p.observe(observation{clock, seq})
	p.advance(valid(clock.Add(time.Millisecond)))
}

// A claim of partitions without positions starts at the head; a short
// batch leaves them at the settled seq (+1), known before the claim.
func TestPositionOrderedFromHeadToSettled(t *testing.T) {
	t.Parallel()
	p, _ := newTestPosition()
	owned := []int32{0, 1}
	st := p.orderedStart(owned)
	wantLo(t, st, 0)
	rows, sps := claimed(0, 5, 7)
	p.orderedDone(st, owned, orderedResult{rows: rows, seqs: sps, dbNow: at(0), clock: at(0)})
	wantCur(t, p, 0, 1, true)
	wantCur(t, p, 1, 1, true)
	p.published([]string{"e5", "e7"})
	wantLo(t, p.orderedStart(owned), 1)

	settle(p, 40, at(time.Second))
	st = p.orderedStart(owned)
	wantLo(t, st, 1)
	p.orderedDone(st, owned, orderedResult{dbNow: at(2 * time.Second), clock: at(2 * time.Second)})
	wantCur(t, p, 0, 41, true)
	wantLo(t, p.orderedStart(owned), 41)
	// One partition without a position: the claim starts at the head.
	wantLo(t, p.orderedStart([]int32{0, 1, 2}), 0)
	// No partitions: nothing to claim, from the head.
	wantLo(t, p.orderedStart(nil), 0)
}

// A full batch moves its partitions past its last event, unless the settled
// seq is lower.
func TestPositionOrderedFullBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		settled int64
		want    int64
	}{
		{"settled above the batch: past its last event", 100, 51},
		{"settled below the batch: the settled seq", 10, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, _ := newTestPosition()
			settle(p, tc.settled, at(0))
			owned := []int32{0}
			st := p.orderedStart(owned)
			rows, sps := claimed(0, 30, 50)
			p.orderedDone(st, owned, orderedResult{rows: rows, seqs: sps, full: true, dbNow: at(time.Second), clock: at(time.Second)})
			wantCur(t, p, 0, tc.want, true)
		})
	}
}

// The frontier of late committers: what a claim saw settles only once a
// frontier read after the claim's clock comes; a writer holding an epoch
// lock holds the frontier (and so the positions) back.
func TestPositionOrderedLateCommitters(t *testing.T) {
	t.Parallel()
	p, _ := newTestPosition()
	owned := []int32{0}
	claim := func(res orderedResult) {
		st := p.orderedStart(owned)
		p.orderedDone(st, owned, res)
	}
	rows, sps := claimed(0, 20)
	claim(orderedResult{rows: rows, seqs: sps, dbNow: at(time.Second), clock: at(time.Second)})
	p.published([]string{"e20"})
	// A frontier before the claim's clock (an epoch still locked): not settled.
	claim(orderedResult{dbNow: at(2 * time.Second), clock: at(2 * time.Second), frontier: valid(at(500 * time.Millisecond))})
	claim(orderedResult{dbNow: at(3 * time.Second), clock: at(3 * time.Second)})
	wantCur(t, p, 0, 1, true)
	// The sequence's last value, read in a claim: settled by a later frontier too.
	claim(orderedResult{dbNow: at(4 * time.Second), clock: at(4 * time.Second), last: &observation{at(4 * time.Second), 33},
		frontier: valid(at(1500 * time.Millisecond))})
	if p.settled != 20 {
		t.Fatalf("settled %d after a frontier past the first observation only; want 20", p.settled)
	}
	claim(orderedResult{dbNow: at(5 * time.Second), clock: at(5 * time.Second)})
	wantCur(t, p, 0, 21, true)
	claim(orderedResult{dbNow: at(6 * time.Second), clock: at(6 * time.Second), frontier: valid(at(5 * time.Second))})
	if p.settled != 33 {
		t.Fatalf("settled %d; want the sequence's 33", p.settled)
	}
	// The claim that read the frontier settled for the claims after it only.
	wantCur(t, p, 0, 21, true)
	claim(orderedResult{dbNow: at(7 * time.Second), clock: at(7 * time.Second)})
	wantCur(t, p, 0, 34, true)
}

// Observations at or below the settled seq are dropped; beyond
// maxObservations pairs merge, each settling later and less.
func TestPositionObservations(t *testing.T) {
	t.Parallel()
	p, _ := newTestPosition()
	settle(p, 10, at(0))
	p.observe(observation{at(time.Second), 10})
	if len(p.obs) != 0 {
		t.Fatalf("%d observations; want an already settled one dropped", len(p.obs))
	}
	for i := range maxObservations {
		p.observe(observation{at(time.Duration(i+2) * time.Second), int64(11 + i)})
	}
	if len(p.obs) != maxObservations {
		t.Fatalf("%d observations; want %d", len(p.obs), maxObservations)
	}
	p.observe(observation{at(time.Hour), 5000})
	if len(p.obs) != maxObservations/2+1 {
		t.Fatalf("%d observations after one past the bound; want %d", len(p.obs), maxObservations/2+1)
	}
	if o := p.obs[0]; o.seq != 11 || !o.at.Equal(at(3*time.Second)) {
		t.Fatalf("first merged observation %+v; want seq 11 at the second one's time", o)
	}
	// A frontier between the first pair's times would have settled 11 before
	// the merge; after it, not until the later time.
	p.advance(valid(at(2500 * time.Millisecond)))
	if p.settled != 10 {
		t.Fatalf("settled %d; want 10", p.settled)
	}
	p.advance(valid(at(3*time.Second + time.Millisecond)))
	if p.settled != 11 {
		t.Fatalf("settled %d; want 11", p.settled)
	}
	// A frontier at an observation's time does not settle it: a seq taken
	// in that instant may still commit.
	p.advance(valid(at(5 * time.Second)))
	if p.settled != 11 {
		t.Fatalf("settled %d by a frontier at the observation's time; want 11", p.settled)
	}
	p.advance(valid(at(5*time.Second + time.Nanosecond)))
	if p.settled != 13 {
		t.Fatalf("settled %d; want 13", p.settled)
	}
}

// Events a claim returned that were neither published nor marked failed (a
// batch out of time, events held back behind a failure) lower their
// partition's position at its next claim; other partitions' are kept for
// their own.
func TestPositionOrderedUnmarked(t *testing.T) {
	t.Parallel()
	p, _ := newTestPosition()
	settle(p, 100, at(0))
	owned := []int32{0, 1, 2}
	st := p.orderedStart(owned)
	r0, s0 := claimed(0, 5)
	r1, s1 := claimed(1, 9)
	r2, s2 := claimed(2, 12)
	p.orderedDone(st, owned, orderedResult{rows: append(append(r0, r1...), r2...), seqs: append(append(s0, s1...), s2...),
		full: true, dbNow: at(time.Second), clock: at(time.Second)})
	for _, part := range owned {
		wantCur(t, p, part, 13, true)
	}
	p.published([]string{"e5"})
	wantLo(t, p.orderedStart([]int32{0, 1}), 9)
	wantCur(t, p, 0, 13, true)
	wantCur(t, p, 1, 9, true)
	if _, ok := p.out["e12"]; !ok {
		t.Fatal("partition 2's unmarked event was dropped by a claim of the others")
	}
	if len(p.out) != 1 {
		t.Fatalf("%d events out; want partition 2's only", len(p.out))
	}
}

// A retry (a failure mark, not dead) waits: from its local due time on,
// claims of its partition start at it, until a claim that started there and
// ran when it was due (by the database) took it.
func TestPositionOrderedRetry(t *testing.T) {
	t.Parallel()
	p, c := newTestPosition()
	settle(p, 100, at(0))
	owned := []int32{0}
	st := p.orderedStart(owned)
	rows, sps := claimed(0, 5)
	p.orderedDone(st, owned, orderedResult{rows: rows, seqs: sps, full: true, dbNow: at(0), clock: at(0)})
	wantCur(t, p, 0, 6, true)

	markAt, markLocal := at(time.Second), c.now().Add(time.Second)
	p.failed([]store.Failure{{ID: "e5", Delay: 10 * time.Second}}, markAt, markLocal)
	if len(p.out) != 0 {
		t.Fatal("the failed event is still out")
	}
	want := waiting{seq: 5, first: markAt.Add(10 * time.Second), due: markAt.Add(10 * time.Second), dueLocal: markLocal.Add(10 * time.Second)}
	if ws := p.waits[0]; len(ws) != 1 || ws[0] != want {
		t.Fatalf("waits %+v; want %+v", ws, want)
	}
	c.advance(11*time.Second - time.Millisecond)
	st = p.orderedStart(owned)
	wantLo(t, st, 6)
	if len(st.below) != 1 || st.below[0] != 5 || !st.belowAt[0].Equal(want.first) {
		t.Fatalf("below %v at %v; want the retry, at its time by the database's clock", st.below, st.belowAt)
	}
	// Not yet due by this process's clock, nor by the claim's now(): the
	// claim's SQL started above it, and it is kept.
	if lo := st.startAt(want.first.Add(-time.Millisecond)); lo != 6 {
		t.Fatalf("startAt before the retry is due = %d, want 6", lo)
	}
	p.orderedDone(st, owned, orderedResult{dbNow: want.first.Add(-time.Millisecond), clock: want.first})
	if len(p.waits[0]) != 1 {
		t.Fatal("a claim that started above the retry dropped it")
	}
	// Not yet due by this process's clock, due by the claim's now() (the
	// claim waited for a connection): its SQL started at the retry, and took
	// it.
	st = p.orderedStart(owned)
	if lo := st.startAt(want.first.Add(time.Second)); lo != 5 {
		t.Fatalf("startAt after the retry is due by the database's clock = %d, want 5", lo)
	}
	c.advance(time.Millisecond)
	st = p.orderedStart(owned)
	wantLo(t, st, 5)
	// Started at it, but ran before it was due by the database: kept.
	p.orderedDone(st, owned, orderedResult{dbNow: want.due.Add(-time.Millisecond), clock: want.due})
	if len(p.waits[0]) != 1 {
		t.Fatal("a claim that ran before the retry was due dropped it")
	}
	st = p.orderedStart(owned)
	wantLo(t, st, 5)
	p.orderedDone(st, owned, orderedResult{dbNow: want.due, clock: want.due})
	if len(p.waits[0]) != 0 {
		t.Fatalf("waits %+v; want the retry taken", p.waits[0])
	}
	wantLo(t, p.orderedStart(owned), 101)
}

// A retry of a partition without a position is not remembered (its claims
// start at the head anyway); failure marks of events not out are ignored.
func TestPositionOrderedRetryAtHead(t *testing.T) {
	t.Parallel()
	p, _ := newTestPosition()
	p.out["e5"] = seqPart{5, 0}
	p.failed([]store.Failure{{ID: "e5", Delay: time.Second}, {ID: "e6", Dead: true}}, at(0), local0)
	if len(p.waits) != 0 || len(p.cur) != 0 || len(p.out) != 0 {
		t.Fatalf("state %+v; want nothing remembered", p)
	}
}

// A dead event lowers its partition's position to it: it releases the
// events of its aggregate held back behind it.
func TestPositionOrderedDead(t *testing.T) {
	t.Parallel()
	p, _ := newTestPosition()
	settle(p, 100, at(0))
	owned := []int32{0}
	st := p.orderedStart(owned)
	rows, sps := claimed(0, 5, 9)
	p.orderedDone(st, owned, orderedResult{rows: rows, seqs: sps, full: true, dbNow: at(0), clock: at(0)})
	p.published([]string{"e9"})
	p.failed([]store.Failure{{ID: "e5", Dead: true}}, at(time.Second), local0)
	wantCur(t, p, 0, 5, true)
	if len(p.waits[0]) != 0 {
		t.Fatal("a dead event waits for a retry")
	}
}

// The retry a claim reports waiting is due locally as long after the claim
// began as it is due after the claim's now() by the database; each owned
// partition remembers it, once however many claims report it.
func TestPositionOrderedReportedWaiting(t *testing.T) {
	t.Parallel()
	p, c := newTestPosition()
	settle(p, 100, at(0))
	owned := []int32{0, 1}
	p.orderedDone(p.orderedStart(owned), owned, orderedResult{dbNow: at(0), clock: at(0)})
	c.advance(time.Second)
	st := p.orderedStart(owned)
	dbNow := at(1200 * time.Millisecond)
	w := st.waitingAt(40, dbNow.Add(3*time.Second), dbNow)
	if want := local0.Add(4 * time.Second); !w.dueLocal.Equal(want) {
		t.Fatalf("dueLocal %v; want %v", w.dueLocal, want)
	}
	p.orderedDone(st, owned, orderedResult{dbNow: dbNow, clock: dbNow, waiting: &w})
	p.orderedDone(p.orderedStart(owned), owned, orderedResult{dbNow: dbNow, clock: dbNow, waiting: &w})
	for _, part := range owned {
		if ws := p.waits[part]; len(ws) != 1 || ws[0] != w {
			t.Fatalf("partition %d waits %+v; want %+v once", part, ws, w)
		}
	}
	wantLo(t, p.orderedStart(owned), 101)
	c.advance(3 * time.Second)
	wantLo(t, p.orderedStart(owned), 40)
}

// Beyond maxWaits retries of a partition, those remembered merge into one:
// the lowest seq, from the earliest local time (and the earliest time by
// the database's clock), until the latest is due.
func TestPositionWaitsMerge(t *testing.T) {
	t.Parallel()
	p, _ := newTestPosition()
	for i := range maxWaits {
		d := time.Duration(i) * time.Second
		p.wait(0, waiting{seq: int64(100 - i), due: at(d), dueLocal: local0.Add(d)})
	}
	if len(p.waits[0]) != maxWaits {
		t.Fatalf("%d waits; want %d", len(p.waits[0]), maxWaits)
	}
	last := waiting{seq: 500, first: at(time.Hour), due: at(time.Hour), dueLocal: local0.Add(time.Hour)}
	p.wait(0, last)
	ws := p.waits[0]
	if len(ws) != 2 {
		t.Fatalf("%d waits after one past the bound; want 2", len(ws))
	}
	merged := waiting{seq: 100 - maxWaits + 1, first: at(0), due: at(time.Duration(maxWaits-1) * time.Second), dueLocal: local0}
	if ws[0] != merged || ws[1] != last {
		t.Fatalf("waits %+v; want %+v then %+v", ws, merged, last)
	}
}

// A move back (a failure mark, the probe, a rewind) during an ordered claim
// keeps the claim from moving the positions forward; it may still lower
// them.
func TestPositionOrderedMovedBackMeanwhile(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) *position {
		p, _ := newTestPosition()
		settle(p, 9, at(0))
		p.orderedDone(p.orderedStart([]int32{0}), []int32{0}, orderedResult{dbNow: at(0), clock: at(0)})
		wantCur(t, p, 0, 10, true)
		settle(p, 19, at(time.Second))
		return p
	}
	t.Run("forward: held", func(t *testing.T) {
		t.Parallel()
		p := setup(t)
		st := p.orderedStart([]int32{0})
		p.failed(nil, at(2*time.Second), local0) // any failure mark
		p.orderedDone(st, []int32{0}, orderedResult{dbNow: at(2 * time.Second), clock: at(2 * time.Second)})
		wantCur(t, p, 0, 10, true)
	})
	t.Run("back: lowered", func(t *testing.T) {
		t.Parallel()
		p := setup(t)
		st := p.orderedStart([]int32{0})
		p.lowerOrdered([]seqPart{{8, 0}})
		rows, sps := claimed(0, 3)
		p.orderedDone(st, []int32{0}, orderedResult{rows: rows, seqs: sps, full: true, dbNow: at(2 * time.Second), clock: at(2 * time.Second)})
		wantCur(t, p, 0, 4, true)
	})
	t.Run("rewound: stays at the head", func(t *testing.T) {
		t.Parallel()
		p := setup(t)
		st := p.orderedStart([]int32{0})
		p.rewind()
		p.orderedDone(st, []int32{0}, orderedResult{dbNow: at(2 * time.Second), clock: at(2 * time.Second)})
		wantCur(t, p, 0, 0, false)
	})
}

// When partitions change hands the relay rewinds: every partition's
// position, retry and event out is forgotten, and the next claim of the
// partitions now owned starts at the head; the settled seq is kept, so the
// claim after it moves them on at once.
func TestPositionOrderedPartitionsChangeHands(t *testing.T) {
	t.Parallel()
	p, c := newTestPosition()
	settle(p, 50, at(0))
	before := []int32{0, 1}
	st := p.orderedStart(before)
	rows, sps := claimed(1, 7)
	w := st.waitingAt(3, at(time.Hour), at(0))
	p.orderedDone(st, before, orderedResult{rows: rows, seqs: sps, dbNow: at(0), clock: at(0), waiting: &w})
	p.rewind()
	after := []int32{1, 2}
	st = p.orderedStart(after)
	wantLo(t, st, 0)
	c.advance(2 * time.Hour)
	p.orderedDone(st, after, orderedResult{dbNow: at(time.Second), clock: at(time.Second)})
	wantCur(t, p, 0, 0, false)
	wantCur(t, p, 1, 51, true)
	wantCur(t, p, 2, 51, true)
	if len(p.waits[1]) != 0 || len(p.out) != 0 {
		t.Fatalf("after the rewind: waits %+v, out %+v; want none", p.waits, p.out)
	}
}

// The probe's view: the owned partitions' positions, by partition (0 where
// unknown or beyond partitions), and the highest; the due events it finds
// below them lower them.
func TestPositionProbe(t *testing.T) {
	t.Parallel()
	p, _ := newTestPosition()
	p.cur[0], p.cur[2], p.cur[5] = 10, 30, 99
	below, highest := p.positions([]int32{0, 1, 2, 5}, 4)
	if fmt.Sprint(below) != "[10 0 30 0]" || highest != 30 {
		t.Fatalf("positions %v, highest %d; want [10 0 30 0], 30", below, highest)
	}
	if _, highest := p.positions([]int32{1}, 4); highest != 0 {
		t.Fatalf("highest %d of partitions at the head; want 0", highest)
	}
	gen := p.gen
	p.lowerOrdered(nil)
	if p.gen != gen {
		t.Fatal("a probe that found nothing bumped the generation")
	}
	p.lowerOrdered([]seqPart{{4, 0}, {40, 2}, {1, 1}})
	wantCur(t, p, 0, 4, true)
	wantCur(t, p, 2, 30, true)
	wantCur(t, p, 1, 0, false)
	if p.gen == gen {
		t.Fatal("a probe that lowered positions did not bump the generation")
	}
}

// A partition this relay lost and took back (a new lease generation): its
// remembered position is forgotten and the next claim starts at the head; an
// event another instance left due below it would be passed over otherwise.
// The same generation keeps it.
func TestPositionOrderedForgetsAPartitionTakenBack(t *testing.T) {
	c := &fakeClock{t: local0}
	p := newPosition(c.now)
	p.leased([]int32{1}, []int64{5})
	p.mu.Lock()
	p.cur[1] = 100
	p.waits[1] = []waiting{{seq: 50, due: db0.Add(time.Hour), dueLocal: local0.Add(time.Hour)}}
	p.mu.Unlock()
	p.leased([]int32{1}, []int64{5})
	if st := p.orderedStart([]int32{1}); st.lo != 100 {
		t.Fatalf("same lease: claim starts at %d, want 100", st.lo)
	}
	p.leased([]int32{1}, []int64{6})
	if st := p.orderedStart([]int32{1}); st.lo != 0 {
		t.Fatalf("lease taken back: claim starts at %d, want the head (0)", st.lo)
	}
	if len(p.waits[1]) != 0 {
		t.Fatalf("waits of the partition taken back kept: %v", p.waits[1])
	}
}
