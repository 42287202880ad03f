package conformance

// Fencing: a relay paused (GC, SIGSTOP, a VM freeze) past its lease, at any
// point of a batch, while another relay takes its work over, changes nothing
// when it resumes. In process, the first relay's batch is held at a point by
// a test hook (relayhook); StoppedProcessPastItsLease stops a real relay
// process with SIGSTOP.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/drivers"
	"github.com/heraldgo/herald/internal/relayhook"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// pauser holds the first batch of a relay to reach a point (where when, if
// set, says so too) until resumed, and reports that batch's end. The relay
// runs one batch at a time (no backlog).
type pauser struct {
	point relayhook.Point
	when  func() bool

	mu      sync.Mutex
	batches int           // batches that claimed rows
	held    int           // the batch held (0: none yet)
	paused  chan struct{} // closed when the batch is held
	resume  chan struct{} // closed to let it go on
	done    chan error    // the held batch's outcome
}

func newPauser(point relayhook.Point, when func() bool) *pauser {
	return &pauser{point: point, when: when, paused: make(chan struct{}), resume: make(chan struct{}), done: make(chan error, 1)}
}

func (p *pauser) hook(pt relayhook.Point, err error) {
	p.mu.Lock()
	if pt == relayhook.Claimed {
		p.batches++
	}
	hold := p.held == 0 && pt == p.point && (p.when == nil || p.when())
	if hold {
		p.held = p.batches
	}
	ended := pt == relayhook.Done && p.held == p.batches
	p.mu.Unlock()
	switch {
	case ended:
		p.done <- err
	case hold:
		close(p.paused)
		<-p.resume
	}
}

// run runs r with the pauser's hook until the test ends.
func (p *pauser) run(t *testing.T, r relayer) {
	testkit.Run(t, func(ctx context.Context) error { return r.Run(relayhook.With(ctx, p.hook)) })
}

func wait[T any](t *testing.T, c <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
	var zero T
	return zero
}

// refuser refuses every Publish call that carries the message x, counts the
// messages of the calls it passes through, and notes when it refused x alone.
type refuser struct {
	*testkit.Counting
	x     string
	alone atomic.Bool
}

func (p *refuser) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.UUID == p.x {
			if len(msgs) == 1 {
				p.alone.Store(true)
			}
			return errors.New("broker refused this event")
		}
	}
	return p.Counting.Publish(topic, msgs...)
}

// total is how many messages a Counting passed through.
func total(c *testkit.Counting) int {
	n := 0
	for _, k := range c.Published() {
		n += k
	}
	return n
}

var pausePoints = []struct {
	name  string
	point relayhook.Point
}{
	{"BeforeItsPublishes", relayhook.Claimed},
	{"BetweenTwoPublishes", relayhook.Publish},
	{"BeforeItsMarks", relayhook.Marks},
}

// A relay (a) is held at a point of its batch longer than its lease: before
// its publishes, between two of them (after a refused one), or after them
// before its marks. Meanwhile another relay (b) takes the batch over: in
// ordered mode it acquires a's partitions once their leases ended, on SQLite
// (unordered) it claims the rows once their claim's lease ended (ended here
// in the table, as a wall clock stepping forward or a frozen process whose
// timers have not fired ends it: the batch's own deadline, a second later by
// the local clock, would otherwise stop its marks); b publishes the rows and
// is held before its own marks. Then a resumes and finishes its batch: it
// changes nothing (no attempt or strike counted, nothing dead, nothing made
// due again) and publishes nothing more; in ordered mode its marks tell it
// the leases were lost (store.ErrLeaseLost). Then b marks: every event is
// published, none dead, and (retention) none both dead and processed. With
// row locks (PostgreSQL, MySQL unordered), a's batch keeps its rows locked
// however long it is paused: b claims none of them meanwhile.
func testRelayPausedPastItsLease(t *testing.T, dl testkit.Dialect) {
	for _, pp := range pausePoints {
		t.Run(pp.name, func(t *testing.T) {
			t.Parallel()
			forModes(t, func(t *testing.T, ordered bool) { pausedPastItsLease(t, dl, pp.point, ordered) })
		})
	}
}

func pausedPastItsLease(t *testing.T, dl testkit.Dialect, point relayhook.Point, ordered bool) {
	const (
		lease = 2 * time.Second
		pt    = 400 * time.Millisecond
	)
	e := newRelayEnv(t, dl)
	first := e.write(1, 3) // the refused event x is the first written: first in every claim
	var x string
	for _, ids := range first {
		x = ids[0].String()
	}
	rest := e.write(3, 3)
	all := map[string]bool{}
	for _, m := range []map[uuid.UUID][]uuid.UUID{first, rest} {
		for id := range testkit.IDSet(m) {
			all[id] = true
		}
	}
	drv, err := drivers.For(e.db)
	must(t, err)
	fenced := ordered || !drv.Caps().Has(store.RowLocks)

	cfg := func(id string) relay.Config {
		return relay.Config{Ordered: ordered, Partitions: 4, LeaseDuration: lease, PublishTimeout: pt,
			PollInterval: 20 * time.Millisecond, PublishConcurrency: 1, MaxAttempts: 1,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, Retention: time.Hour, InstanceID: id}
	}
	gc := testkit.NewGoChannel()
	pa := &refuser{Counting: &testkit.Counting{Publisher: gc}, x: x}
	var when func() bool
	if point == relayhook.Publish {
		when = pa.alone.Load // the call after x's own refused call
	}
	ha := newPauser(point, when)
	ha.run(t, e.relay(e.open(), pa, cfg("a")))
	wait(t, ha.paused, 20*time.Second, "a's batch held")

	pb := &testkit.Counting{Publisher: gc}
	hb := newPauser(relayhook.Marks, func() bool { return total(pb) == len(all) })
	switch {
	case ordered:
		// a's leases end, and its heartbeat (the last one, at most a third of
		// a lease after the pause began) ages past a lease: b takes all the
		// partitions at once.
		time.Sleep(lease + lease/3 + lease/2)
	case fenced:
		time.Sleep(2 * pt) // past a's batch's start-by time: it starts no Publish call
		// a's claim expires (SQLite, whose unordered batches hold their rows by a
		// row of the claims table)
		must(t, e.db.Exec(`UPDATE outbox_messages_claims SET expires_at = 0`).Error)
	}
	b := e.relay(e.open(), pb, cfg("b"))
	if fenced {
		hb.run(t, b)
	} else {
		e.run(b)
	}
	if fenced {
		wait(t, hb.paused, 20*time.Second, "b holding a's batch, published, before its marks")
		if n := total(pb); n != len(all) {
			t.Fatalf("b published %d events of %d", n, len(all))
		}
	} else {
		time.Sleep(lease) // b polls all along
		if n := total(pb); n != 0 {
			t.Fatalf("b published %d events while a's paused batch held them locked", n)
		}
	}
	byA := total(pa.Counting)
	close(ha.resume)
	// In ordered mode a learns from its marks that it lost the partitions.
	if err := wait(t, ha.done, 20*time.Second, "a's batch over"); ordered && point != relayhook.Claimed && !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("a's batch, its marks fenced by the leases it lost: %v; want store.ErrLeaseLost", err)
	}
	if fenced {
		if !ordered {
			time.Sleep(300 * time.Millisecond) // a would claim what it made due again
		}
		close(hb.resume)
		if err := wait(t, hb.done, 20*time.Second, "b's batch over"); err != nil {
			t.Fatalf("b's batch: %v", err)
		}
	}
	eventually(t, 20*time.Second, "outbox drained", func() bool { return e.pending() == 0 })
	time.Sleep(200 * time.Millisecond) // a late publish by a would show
	for _, r := range e.rows() {
		if r.Dead && r.Processed {
			t.Fatalf("event %s is both dead and processed", r.ID)
		}
	}
	if !fenced {
		return
	}
	if n := total(pa.Counting); n != byA {
		t.Fatalf("a published %d events after it resumed, past its lease", n-byA)
	}
	for _, r := range e.rows() {
		if r.Dead || !r.Processed || r.Attempts != 0 || r.Strikes != 0 {
			t.Fatalf("event %s (x: %v) after a resumed: dead %v, processed %v, attempts %d, strikes %d (last error %q): a's late marks changed it",
				r.ID, r.ID.String() == x, r.Dead, r.Processed, r.Attempts, r.Strikes, r.LastError)
		}
	}
	s, err := b.Stats(context.Background())
	must(t, err)
	if s.Pending != 0 || s.Dead != 0 {
		t.Fatalf("stats = %+v: want nothing pending or dead", s)
	}
	if got := fmt.Sprint(len(e.rows())); got != fmt.Sprint(len(all)) {
		t.Fatalf("%s rows, want %d", got, len(all))
	}
}
