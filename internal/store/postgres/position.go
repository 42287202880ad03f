package postgres

import (
	"database/sql"
	"math"
	"sync"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// Positions. A queue in a table slows down when its deleted rows cannot be
// vacuumed (while a transaction holds an xid or a snapshot: a pg_dump, an
// analytics query, a session idle in transaction): a claim that starts at the
// head of the pending index walks the index entries of every published row
// and checks each in the heap, as none can be marked dead. So claims start
// from a remembered position instead, and a sweep, in a cycle of its own,
// looks below it now and then (relay.Config.SweepInterval).
//
// The position must never pass a row that may still become due below it. The
// rows a writer inserts become visible at its commit, which may come long
// after the insert took its seq and available_at: epochs cover these. The
// first insert of a transaction into the table first takes, for the
// transaction, a shared advisory lock keyed by the table's oid and by its
// epoch (the 10 ms slice of the database's clock it runs in), and its
// available_at is the time after that (clock_timestamp()); the transaction's
// later inserts take none (a transaction-local setting says it holds one):
// their rows come after that epoch's start, which its lock holds the
// frontier at, so a transaction holds one epoch lock per outbox table
// however long it writes. A claim reads pg_locks now and then and learns the
// frontier: the start of the oldest epoch still locked on this table, or,
// with none, the time it looked. Every row
// inserted with an available_at before the frontier, and every row whose seq
// was taken before it, has committed or rolled back by then, so a claim that
// begins later sees it. A writer that read its epoch before that time and
// locks after it inserts after it. A transaction that inserted and goes on
// (a caller's, working after its save) holds the frontier back to where it
// began, and the positions with it; one that only reads, or writes other
// tables, does not.
//
// Unordered claims start at the last row claimed, in (available_at, id)
// order, never above the frontier known before the claim; the relay's
// concurrent batches claim one after the other, each from where the last
// ended. Rows that come back below the position are lowered to (this relay's
// failure marks, whose commit a concurrent claim may not see), rewound for
// (this relay's requeues and outage recoveries; batches whose marks may not
// have committed or that left rows untried, by the relay), or left to the
// sweep, which claims from the head (rows another instance claimed and
// released by rolling back or dying, requeues by another process).
//
// Ordered claims start, per partition, after the last event claimed when the
// claim came back full, else at the settled seq: the highest seq seen (by a
// claim, or in the sequence where the role may read it) before a frontier.
// Each claim also returns where and when the earliest event of its
// partitions waiting for a retry is, and this relay's failure marks add
// theirs: from that time on, claims of the partition start there, so that the
// retry and the events held back behind it are claimed again, until a claim
// that ran after it was due took it. The time is checked twice: by this
// process's clock when the claim begins, and by the claim's now() in its SQL
// (which comes later when the claim waits for a connection or the process is
// stopped: a retry due by then, below a start chosen earlier, would not hold
// its aggregate's later events back). A dead event lowers its partition's
// position (it releases the events behind it); events claimed and neither
// published nor marked failed (a batch out of time, events held back behind a
// failure) lower it at its next claim; taking partitions over rewinds. The
// sweep looks for due events below the positions (a requeue by another
// process, rows written by something else than Herald) and lowers them.

// key is a position in the pending index (available_at, id).
type key struct {
	at time.Time
	id string // canonical text: ordered as the uuid
}

const nilUUID = "00000000-0000-0000-0000-000000000000"

func (k key) less(o key) bool {
	if !k.at.Equal(o.at) {
		return k.at.Before(o.at)
	}
	return k.id < o.id
}

// seqPart is an ordered event's seq and partition.
type seqPart struct {
	seq  int64
	part int32
}

// observation: every seq up to seq was taken before at (database time).
type observation struct {
	at  time.Time
	seq int64
}

const (
	// frontierEvery is how often a claim also reads the frontier.
	frontierEvery = 20 * time.Millisecond
	// maxObservations bounds the observations waiting for the frontier.
	maxObservations = 1024
)

// position is the claim-position state machine: where the relay's claims
// start, and what moves it (see Positions above). It runs no SQL: the claims
// and marks tell it what they did, and it decides from that and from its
// clock, now (this process's time; time.Now in production). Its methods are
// safe for concurrent use.
//
// Unordered mode: unorderedStart, then unorderedDone, around each claim;
// failed after failure marks; the sweeping view's claims pass sweep. Ordered
// mode: orderedStart, then orderedDone, around each claim; published and
// failed after the marks; positions and lowerOrdered around the probe.
// rewind forgets it all.
type position struct {
	now func() time.Time // this process's clock

	claimMu  sync.Mutex // held by an unordered claim (not the sweep's) while it runs
	mu       sync.Mutex
	gen      uint64    // bumped by every move back: a claim that began before it does not move forward
	frontier time.Time // database time; zero until known
	checked  time.Time // local time the last frontier read began
	claimed  bool      // a claim began (the first reads no frontier)

	// unordered
	at    key
	known bool

	// ordered
	leases  map[int32]int64     // per partition: the lease generation cur and waits were learned under
	cur     map[int32]int64     // per partition: claims start here; missing: at the head
	waits   map[int32][]waiting // per partition: retries below or above it, until a claim took them
	out     map[string]seqPart  // claimed, not yet marked
	settled int64               // every seq up to it has committed or rolled back
	obs     []observation
}

// waiting is an event waiting for a retry (or the earliest of several: at or
// above seq), due at due by the database's clock (the first of several at
// first, the last at due). Claims start at seq from dueLocal on, by this
// process's clock, which is never after first, or, in the claim's SQL, from
// first on by the database's; a claim that started there and ran at or
// after due took it (claimed it, or found it held back behind an earlier
// retry, which is waiting too).
type waiting struct {
	seq                  int64
	first, due, dueLocal time.Time
}

// maxWaits bounds the retries remembered per partition; beyond it they are
// merged into one that starts at the lowest seq from the earliest time until
// the latest is due.
const maxWaits = 64

// newPosition returns a position at the head that reads the time from now.
func newPosition(now func() time.Time) *position {
	return &position{now: now, leases: map[int32]int64{}, cur: map[int32]int64{}, waits: map[int32][]waiting{}, out: map[string]seqPart{}}
}

// leased takes the lease generations of the partitions a claim works on. A
// partition whose lease changed since its position was learned changed hands
// meanwhile (this relay lost it and took it back): another instance claimed,
// failed, recovered there, so the position is forgotten and its claims start
// at the head. A remembered position above an event another instance left
// due (its outage recovery makes retries due at once) would pass it, and the
// later events of its aggregate would be published first.
func (p *position) leased(parts []int32, gens []int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, part := range parts {
		if g, ok := p.leases[part]; ok && g == gens[i] {
			continue
		}
		if _, known := p.cur[part]; known || len(p.waits[part]) > 0 {
			delete(p.cur, part)
			delete(p.waits, part)
			p.gen++ // claims that began before do not move it forward
		}
		p.leases[part] = gens[i]
	}
}

// clock reads this process's clock: the local time a mark or claim begins at,
// taken before the database's own so that it is never later.
func (p *position) clock() time.Time { return p.now() }

// wait remembers a retry of partition part.
func (p *position) wait(part int32, w waiting) {
	if w.first.IsZero() {
		w.first = w.due
	}
	ws := p.waits[part]
	for _, o := range ws {
		if o.seq == w.seq && o.due.Equal(w.due) {
			return // the same (a claim sees it again)
		}
	}
	if len(ws) >= maxWaits {
		m := ws[0]
		for _, o := range ws[1:] {
			m.seq = min(m.seq, o.seq)
			if o.due.After(m.due) {
				m.due = o.due
			}
			if o.first.Before(m.first) {
				m.first = o.first
			}
			if o.dueLocal.Before(m.dueLocal) {
				m.dueLocal = o.dueLocal
			}
		}
		ws = ws[:1]
		ws[0] = m
	}
	p.waits[part] = append(ws, w)
}

// checkDue reports whether this claim reads the frontier: the second
// claim, and then one every frontierEvery. The first claim starts at the
// head, and no frontier read during a claim moves the position after it:
// its read would serve the next claim only, and a relay whose first claim
// is its last (a fleet tenant's short backlog, drained at once) would pay
// for it (pg_locks, every lock of the server, half of a cold claim's
// cost) for nothing. A relay with more to claim reads it at its second.
func (p *position) checkDue() bool {
	if !p.claimed {
		p.claimed = true
		return false
	}
	if now := p.now(); now.Sub(p.checked) >= frontierEvery {
		p.checked = now
		return true
	}
	return false
}

// advance takes a frontier read and settles the observations before it.
func (p *position) advance(f sql.NullTime) {
	if !f.Valid || !f.Time.After(p.frontier) {
		return
	}
	p.frontier = f.Time
	kept := p.obs[:0]
	for _, o := range p.obs {
		if o.at.Before(p.frontier) {
			p.settled = max(p.settled, o.seq)
		} else {
			kept = append(kept, o)
		}
	}
	p.obs = kept
}

// observe remembers o until a frontier settles it (at most maxObservations:
// beyond, pairs are merged).
func (p *position) observe(o observation) {
	if o.seq <= p.settled {
		return
	}
	if len(p.obs) >= maxObservations {
		// Merge pairs: the later time with the lower seq settles later, and less.
		half := p.obs[:0]
		for i := 0; i+1 < len(p.obs); i += 2 {
			half = append(half, observation{p.obs[i+1].at, p.obs[i].seq})
		}
		p.obs = half
	}
	p.obs = append(p.obs, o)
}

// unorderedClaim is where an unordered claim starts (unorderedStart), for its
// unorderedDone.
type unorderedClaim struct {
	from     *key // nil: the head
	gen      uint64
	check    bool
	frontier time.Time
}

// unorderedStart begins an unordered claim: from the position, or from the
// head when it is unknown or for the sweep; st.check says whether the claim
// reads the frontier.
func (p *position) unorderedStart(sweep bool) unorderedClaim {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := unorderedClaim{gen: p.gen, check: p.checkDue(), frontier: p.frontier}
	if !sweep && p.known {
		k := p.at
		st.from = &k
	}
	return st
}

// unorderedDone moves the position after a claim: to its last row when it came
// back full, else to its time (every visible due row was claimed, or locked by
// another instance); never above the frontier known before it.
func (p *position) unorderedDone(st unorderedClaim, sweep bool, last key, full bool, dbNow time.Time, f sql.NullTime) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(f)
	if sweep || st.frontier.IsZero() {
		return
	}
	bound := key{st.frontier, nilUUID}
	if now := (key{dbNow, nilUUID}); now.less(bound) {
		bound = now
	}
	if full && last.less(bound) {
		bound = last
	}
	switch {
	case st.gen == p.gen:
		if !p.known || p.at.less(bound) {
			p.at, p.known = bound, true
		}
	case p.known && bound.less(p.at):
		p.at = bound
	}
}

// lowerUnorderedLocked lowers the unordered position to at, and makes the
// claims running meanwhile keep theirs from moving it forward.
func (p *position) lowerUnorderedLocked(at time.Time) {
	if k := (key{at, nilUUID}); p.known && k.less(p.at) {
		p.at = k
	}
	p.gen++
}

// failed takes failure marks made at now (database time): their retries are
// due after it; a dead event releases the later events of its aggregate.
func (p *position) failed(fs []store.Failure, now, local time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lowerUnorderedLocked(now)
	for _, f := range fs {
		sp, ok := p.out[f.ID]
		if !ok {
			continue
		}
		delete(p.out, f.ID)
		if f.Dead {
			if c, ok := p.cur[sp.part]; ok && sp.seq < c {
				p.cur[sp.part] = sp.seq
			}
			continue
		}
		if _, ok := p.cur[sp.part]; ok {
			p.wait(sp.part, waiting{seq: sp.seq, first: now.Add(f.Delay), due: now.Add(f.Delay), dueLocal: local.Add(f.Delay)})
		}
	}
}

// published forgets the claimed events that were marked published.
func (p *position) published(ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		delete(p.out, id)
	}
}

// rewind forgets the positions: the next claims start at the head, and the
// claims running meanwhile do not move them.
func (p *position) rewind() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.known = false
	clear(p.cur)
	clear(p.waits)
	clear(p.out)
	p.gen++
}

// orderedClaim is where an ordered claim starts (orderedStart), for its
// orderedDone.
type orderedClaim struct {
	lo int64 // the lowest position of the partitions; 0: the head
	// The retries below lo not yet due by this process's clock, and when
	// each is due by the database's (waiting.first): the claim's SQL starts
	// at the lowest of those due by its now() (startAt), which comes later
	// than this process's clock was read when the claim waited for a
	// connection or the process was stopped.
	below   []int64
	belowAt []time.Time
	gen     uint64
	check   bool
	settled int64
	local   time.Time // this process's clock when the claim began
}

// waitingAt is the retry a claim reports waiting, at seq and due at due by
// the database's clock, whose now() was dbNow: due locally as long after the
// claim began.
func (st orderedClaim) waitingAt(seq int64, due, dbNow time.Time) waiting {
	return waiting{seq: seq, first: due, due: due, dueLocal: st.local.Add(due.Sub(dbNow))}
}

// orderedResult is what an ordered claim returned.
type orderedResult struct {
	rows     []store.Row
	seqs     []seqPart
	full     bool      // the claim read as many candidates as it could take
	lastCand int64     // the seq of its last candidate (claimed or held back behind a retry)
	stranded int64     // a due event below its start holding a candidate back; 0 for none
	dbNow    time.Time // the claim's now()
	clock    time.Time // after the claim's snapshot
	frontier sql.NullTime
	waiting  *waiting
	last     *observation // the sequence's last value, where readable
}

// orderedStart begins an ordered claim of the owned partitions: from the
// lowest of their positions, or of the retries whose time came (by this
// process's clock); from the head if one of them has none. Events the last
// claim returned that were neither published nor marked failed lower their
// partitions' positions first.
func (p *position) orderedStart(owned []int32) orderedClaim {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	in := make(map[int32]bool, len(owned))
	for _, part := range owned {
		in[part] = true
	}
	// Events the last claim of these partitions returned that were neither
	// published nor marked failed are still pending.
	for id, sp := range p.out {
		if in[sp.part] {
			if c, ok := p.cur[sp.part]; ok && sp.seq < c {
				p.cur[sp.part] = sp.seq
			}
			delete(p.out, id)
		}
	}
	st := orderedClaim{gen: p.gen, check: p.checkDue(), settled: p.settled, local: now}
	lo := int64(math.MaxInt64)
	for _, part := range owned {
		c, ok := p.cur[part]
		if !ok {
			return st // lo 0: from the head
		}
		lo = min(lo, c)
		// Retries whose time came, and the events held back behind them.
		for _, w := range p.waits[part] {
			if !now.Before(w.dueLocal) {
				lo = min(lo, w.seq)
			}
		}
	}
	if len(owned) == 0 {
		return st
	}
	st.lo = lo
	for _, part := range owned {
		for _, w := range p.waits[part] {
			if w.seq < lo && now.Before(w.dueLocal) {
				st.below, st.belowAt = append(st.below, w.seq), append(st.belowAt, w.first)
			}
		}
	}
	return st
}

// startAt is where the claim's SQL started, its now() dbNow: lo, or the
// lowest retry below it due by then.
func (st orderedClaim) startAt(dbNow time.Time) int64 {
	lo := st.lo
	for i, seq := range st.below {
		if seq < lo && !dbNow.Before(st.belowAt[i]) {
			lo = seq
		}
	}
	return lo
}

// orderedDone moves the partitions' positions after a claim: past its last
// event when it came back full, else to the settled seq; and notes where the
// earliest retry waits.
func (p *position) orderedDone(st orderedClaim, owned []int32, res orderedResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// The claim read the frontier after its clock: it may settle what the
	// claim saw.
	if res.last != nil {
		p.observe(*res.last)
	}
	next := st.settled + 1
	if n := len(res.seqs); n > 0 {
		p.observe(observation{res.clock, res.seqs[n-1].seq})
	}
	if res.full {
		next = min(next, max(res.lastCand, lastSeqOf(res.seqs))+1)
	}
	if res.stranded > 0 {
		next = min(next, res.stranded)
	}
	p.advance(res.frontier)
	lo := st.startAt(res.dbNow)
	for _, part := range owned {
		if st.gen == p.gen {
			p.cur[part] = next
		} else if c, ok := p.cur[part]; ok && next < c {
			p.cur[part] = next
		}
		kept := p.waits[part][:0]
		for _, w := range p.waits[part] {
			if w.seq < lo || res.dbNow.Before(w.due) {
				kept = append(kept, w)
			}
		}
		p.waits[part] = kept
		if res.waiting != nil {
			p.wait(part, *res.waiting)
		}
	}
	for i, c := range res.rows {
		p.out[c.ID] = res.seqs[i]
	}
}

// positions returns the partitions' positions indexed by partition (0 where
// unknown) and the highest of the owned ones.
func (p *position) positions(owned []int32, partitions int) ([]int64, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int64, partitions)
	var highest int64
	for _, part := range owned {
		if c, ok := p.cur[part]; ok && int(part) < partitions {
			out[part] = c
			highest = max(highest, c)
		}
	}
	return out, highest
}

// lowerOrdered lowers the partitions' positions to the due events the probe
// found below them.
func (p *position) lowerOrdered(found []seqPart) {
	if len(found) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sp := range found {
		if c, ok := p.cur[sp.part]; ok && sp.seq < c {
			p.cur[sp.part] = sp.seq
		}
	}
	p.gen++
}

// lastSeqOf is the seq of the last of seqs, 0 when none.
func lastSeqOf(seqs []seqPart) int64 {
	if len(seqs) == 0 {
		return 0
	}
	return seqs[len(seqs)-1].seq
}
