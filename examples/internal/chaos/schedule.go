package main

// Scheduled events (issue 33) in the chaos run. The writers schedule some of
// their events (events.After or events.At, 0.2-3s ahead; half under a key of
// their own; in ordered mode 2 in 5 apart from their account's order, the
// others in line), each with a reminder row, the business state, in the same
// transaction. Other goroutines then cancel or move many of them, by id or by
// key, in transactions that also change the reminder (read it first, half of
// the time, then set what Cancel or Move returned), 1 in 5 rolled back after
// Cancel or Move returned; half of them at the due time, racing the relays.
//
// The ledger keeps, per scheduled event, the bounds of its due time (the
// writer's clock around the save, or around a Move's call: the database's
// clock read in between, the same machine's), and what each Cancel and Move
// returned and how its transaction ended. The reminders say, at the end, what
// committed: a cancel committed (its transaction wrote state "cancelled") and
// the last move committed (move_n), whatever the writer could not know (a
// commit that failed). The relays write down each attempt to publish a
// scheduled event (the message's due time, herald_due_at, and the clock), the
// observer when it first read one. Then: every scheduled event not cancelled
// was applied (once: the effects' accounting), none was attempted or read
// before its due time (clockSlack allowed), none whose cancel committed was
// ever attempted, stored, read or applied, each carried the due time of its
// save or of its last committed move, and the reminders agree with what
// Cancel and Move returned.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/outboxhook"
)

// Scheduled events are due this long after their save, at least and at most.
const (
	schedMin = 200 * time.Millisecond
	schedMax = 3 * time.Second
)

// clockSlack is how far two reads of this machine's clock, the database's and
// a process's, may disagree: SQLite's clock has milliseconds, and the
// writer's reads around a statement are not the statement's.
const clockSlack = 5 * time.Millisecond

// schedTail is how long before the end of the writes the writers stop
// scheduling events, so that the cancels and moves of the last ones are done
// about when the writers stop (the drain is not made longer).
const schedTail = 6 * time.Second

// Reminder is the business state of a scheduled event: written with it, and
// changed by the transaction that cancels or moves it.
type Reminder struct {
	EventID     string `gorm:"primaryKey;size:36"`
	AccountID   string `gorm:"size:36"`
	ScheduleKey string `gorm:"size:64"`
	// State is "scheduled", then what the last committed Cancel or Move
	// returned: "cancelled", "moved", or "late" (too late to change).
	State string `gorm:"size:16"`
	// MoveN is the number of the last move committed (the event's n-th
	// Move; 0: none).
	MoveN int
	// Touched counts the transactions that changed it.
	Touched int
}

// schedEvent is what the ledger knows of one committed scheduled event.
type schedEvent struct {
	account string
	version int // the account's version the event carries
	key     string
	apart   bool
	// bounds[n] are the bounds of the due time its n-th Move asked for (0:
	// its save), by the writer's clock around the statement.
	bounds [][2]time.Time
	// What the Cancel and Move calls returned in transactions whose outcome
	// the writer knows: a cancel committed, the last move committed.
	cancelled bool
	moveN     int
	// unknown: a transaction that changed it failed at its commit: the
	// writer does not know whether it committed (the reminders tell).
	unknown bool
	// history is what was done to it, for the log of a violation.
	history []string
}

// dueBounds are the bounds of the due time s gives by the database's clock,
// read between before and after.
func dueBounds(s events.Schedule, before, after time.Time) [2]time.Time {
	if !s.At.IsZero() {
		return [2]time.Time{maxTime(s.At, before), maxTime(s.At, after)}
	}
	return [2]time.Time{before.Add(s.After), after.Add(s.After)}
}

// The outcomes of a Cancel or Move transaction, counted per kind.
const (
	outChanged   = iota // Cancel or Move returned nil, and the transaction committed
	outUndone           // returned nil, and the transaction was rolled back on purpose
	outDue              // ErrDue
	outPublished        // ErrPublished
	outNotSched         // ErrNotScheduled (published and deleted, no retention)
	outDead             // ErrDead
	outFailed           // another error: the transaction rolled back
	outUnknown          // returned nil, the commit failed: judged by the reminders
	outcomes
)

// scheduler hands the writers their scheduled events (at rate a second) and
// cancels and moves them.
type scheduler struct {
	db      *gorm.DB // the writers' (with the hook)
	led     *ledger
	rate    int
	ordered bool
	tokens  atomic.Int64
	sem     chan struct{} // transactions of cancels and moves at once
	wg      sync.WaitGroup
	cancels [outcomes]atomic.Int64
	moves   [outcomes]atomic.Int64
	byKey   atomic.Int64 // of the cancels and moves: through CancelKey, MoveKey
	errs    atomic.Int64
}

func newScheduler(db *gorm.DB, led *ledger, rate int, ordered bool) *scheduler {
	return &scheduler{db: db, led: led, rate: rate, ordered: ordered, sem: make(chan struct{}, 4)}
}

// run hands out a scheduled event every 1/rate s until ctx ends; tokens not
// taken do not pile up beyond a second's worth.
func (s *scheduler) run(ctx context.Context) {
	if s == nil || s.rate <= 0 {
		return
	}
	t := time.NewTicker(time.Second / time.Duration(s.rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.tokens.Load() < int64(s.rate) {
			s.tokens.Add(1)
		}
	}
}

// take reports whether the caller's next event is to be scheduled.
func (s *scheduler) take() bool {
	if s == nil {
		return false
	}
	for {
		n := s.tokens.Load()
		if n <= 0 {
			return false
		}
		if s.tokens.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// plan is the schedule of a writer's next scheduled event.
func (s *scheduler) plan() events.Schedule {
	d := schedMin + rand.N(schedMax-schedMin)
	sc := events.After(d)
	if rand.IntN(4) == 0 {
		sc = events.At(time.Now().Add(d))
	}
	if rand.IntN(2) == 0 {
		sc = sc.Keyed("reminder-" + uuid.NewString())
	}
	if s.ordered && rand.IntN(5) < 2 {
		sc = sc.Detached()
	}
	return sc
}

// committed books event id of account, scheduled by sc in a transaction that
// began at began and committed at ended, and follows it: cancels or moves
// it, or leaves it alone.
func (s *scheduler) committed(id, account string, version int, sc events.Schedule, began, ended time.Time) {
	s.led.mu.Lock()
	s.led.sched[id] = &schedEvent{account: account, version: version, key: sc.Key, apart: sc.Apart && s.ordered,
		bounds:  [][2]time.Time{dueBounds(sc, began, ended)},
		history: []string{fmt.Sprintf("saved %s, transaction %s..%s", describeSchedule(sc), began.Format(clockFormat), ended.Format(clockFormat))}}
	s.led.mu.Unlock()
	s.wg.Go(func() { s.follow(id) })
}

// wait waits for the cancels and moves under way.
func (s *scheduler) wait() {
	if s != nil {
		s.wg.Wait()
	}
}

// follow decides what becomes of a scheduled event: left alone (3 in 10),
// cancelled (7 in 20), or moved (7 in 20; 2 in 5 of those then cancelled or
// moved again). Each action comes, half of the time, at the event's expected
// due time (±40ms, racing the relays), else at a random time before.
func (s *scheduler) follow(id string) {
	var acts []bool // true: cancel, false: move
	switch r := rand.IntN(20); {
	case r < 6:
		return
	case r < 13:
		acts = []bool{true}
	default:
		acts = []bool{false}
		if rand.IntN(5) < 2 {
			acts = append(acts, rand.IntN(2) == 0)
		}
	}
	for _, cancel := range acts {
		due, done := s.led.expectedDue(id)
		if done {
			return
		}
		until := time.Until(due)
		var wait time.Duration
		if rand.IntN(2) == 0 {
			wait = until + time.Duration(rand.Int64N(int64(80*time.Millisecond))) - 40*time.Millisecond
		} else if until > 50*time.Millisecond {
			wait = rand.N(until - 50*time.Millisecond)
		}
		if wait > 0 {
			time.Sleep(wait)
		}
		s.act(id, cancel)
	}
}

// moveTarget is where a Move sends an event: now (1 in 8), a time up to
// 2.5s ahead or already past (At), or 0.2-3s after the move (After).
func moveTarget() events.Schedule {
	switch r := rand.IntN(8); {
	case r == 0:
		return events.Schedule{}
	case r < 3:
		return events.At(time.Now().Add(time.Duration(rand.Int64N(int64(3*time.Second))) - 500*time.Millisecond))
	}
	return events.After(schedMin + rand.N(schedMax-schedMin))
}

// act cancels or moves event id in a transaction that reads its reminder
// first (half of the time) and writes what Cancel or Move returned to it; 1
// in 5 of them are rolled back after that. By key when the event has one,
// half of the time.
func (s *scheduler) act(id string, cancel bool) {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	key, n := s.led.schedKey(id, cancel)
	byKey := key != "" && rand.IntN(2) == 0
	if byKey {
		s.byKey.Add(1)
	}
	var to events.Schedule
	if !cancel {
		to = moveTarget()
	}
	rollback, readFirst := rand.IntN(5) == 0, rand.IntN(2) == 0
	var (
		res                   error
		callBefore, callAfter time.Time
		bodyDone              bool
	)
	uid := uuid.MustParse(id)
	err := s.db.Transaction(func(tx *gorm.DB) error {
		if readFirst {
			var r Reminder
			if err := tx.Take(&r, "event_id = ?", id).Error; err != nil {
				return err
			}
		}
		callBefore = time.Now()
		switch {
		case cancel && byKey:
			var rs outboxhook.Rescheduled
			rs, res = outboxhook.CancelKey(tx, key)
			res = keyOutcome(rs, res)
		case cancel:
			res = outboxhook.Cancel(tx, uid)
		case byKey:
			var rs outboxhook.Rescheduled
			rs, res = outboxhook.MoveKey(tx, key, to)
			res = keyOutcome(rs, res)
		default:
			res = outboxhook.Move(tx, uid, to)
		}
		callAfter = time.Now()
		upd := map[string]any{"touched": gorm.Expr("touched + 1")}
		switch {
		case res == nil && cancel:
			upd["state"] = "cancelled"
		case res == nil:
			upd["state"], upd["move_n"] = "moved", n
		case late(res):
			upd["state"] = "late"
		default:
			return res
		}
		if err := tx.Model(&Reminder{}).Where("event_id = ?", id).Updates(upd).Error; err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		bodyDone = true
		return nil
	})
	out := outFailed
	switch {
	case err == nil && res == nil:
		out = outChanged
	case bodyDone && err != nil && res == nil:
		out = outUnknown
	case errors.Is(err, errRollback) && res == nil:
		out = outUndone
	case errors.Is(res, outboxhook.ErrDue):
		out = outDue
	case errors.Is(res, outboxhook.ErrPublished):
		out = outPublished
	case errors.Is(res, outboxhook.ErrNotScheduled):
		out = outNotSched
	case errors.Is(res, outboxhook.ErrDead):
		out = outDead
	}
	if out == outFailed && s.errs.Add(1) <= 5 {
		fmt.Fprintf(os.Stderr, "chaos: scheduled event %s: cancel %v: %v\n", id, cancel, err)
	}
	counts := &s.moves
	if cancel {
		counts = &s.cancels
	}
	counts[out].Add(1)
	what := "cancel"
	if !cancel {
		what = fmt.Sprintf("move %d to %s", n, describeSchedule(to))
	}
	if byKey {
		what += " by key"
	}
	s.led.booked(id, cancel, n, dueBounds(to, callBefore, callAfter), out,
		fmt.Sprintf("%s, called %s..%s: %s (read first %v, rollback %v, tx %v)", what, callBefore.Format(clockFormat), callAfter.Format(clockFormat),
			outcomeNames[out], readFirst, rollback, err))
}

// outcomeNames name the outcomes for the log.
var outcomeNames = [outcomes]string{"changed", "changed, rolled back", "ErrDue", "ErrPublished", "ErrNotScheduled", "ErrDead", "failed", "commit failed"}

// clockFormat is how the log shows a time.
const clockFormat = "15:04:05.000000"

// describeSchedule is s for the log.
func describeSchedule(s events.Schedule) string {
	switch {
	case !s.At.IsZero():
		return "At(" + s.At.Format(clockFormat) + ")"
	case s.After > 0:
		return fmt.Sprintf("After(%v)", s.After)
	}
	return "now"
}

// keyOutcome is what Cancel or Move would have returned for the one event of
// a key (the keys are the events' own) that CancelKey or MoveKey found so.
func keyOutcome(rs outboxhook.Rescheduled, err error) error {
	switch {
	case err != nil:
		return err
	case rs.Changed > 0:
		return nil
	case rs.Published > 0:
		return outboxhook.ErrPublished
	case rs.Dead > 0:
		return outboxhook.ErrDead
	case rs.Due > 0:
		return outboxhook.ErrDue
	}
	return outboxhook.ErrNotScheduled
}

// late reports whether err says the event could not be changed any more.
func late(err error) bool {
	return errors.Is(err, outboxhook.ErrDue) || errors.Is(err, outboxhook.ErrPublished) ||
		errors.Is(err, outboxhook.ErrNotScheduled) || errors.Is(err, outboxhook.ErrDead)
}

// expectedDue is when scheduled event id is due as far as the writer knows,
// and whether it is done with (a cancel committed, or may have).
func (l *ledger) expectedDue(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.sched[id]
	return e.bounds[e.moveN][1], e.cancelled || e.unknown
}

// schedKey returns scheduled event id's key and, for a move, its number (the
// bounds it will fill).
func (l *ledger) schedKey(id string, cancel bool) (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.sched[id]
	if cancel {
		return e.key, 0
	}
	e.bounds = append(e.bounds, [2]time.Time{})
	return e.key, len(e.bounds) - 1
}

// booked books a cancel or move (the n-th) of event id, which came out so;
// a move asked for a due time within b.
func (l *ledger) booked(id string, cancel bool, n int, b [2]time.Time, out int, note string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.sched[id]
	e.history = append(e.history, note)
	if !cancel {
		e.bounds[n] = b
	}
	switch {
	case out == outUnknown:
		e.unknown = true
	case out == outChanged && cancel:
		e.cancelled = true
	case out == outChanged:
		e.moveN = n
	}
}

// schedCounts are the scheduled events committed, and those whose cancel
// committed or may have, as far as the writers know.
func (l *ledger) schedCounts() (scheduled, cancelled int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.sched {
		if e.cancelled || e.unknown {
			cancelled++
		}
	}
	return len(l.sched), cancelled
}

// apartIDs are the scheduled events published apart from their account's
// order (ordered mode): the order is not judged on them.
func (l *ledger) apartIDs() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]bool{}
	for id, e := range l.sched {
		if e.apart {
			out[id] = true
		}
	}
	return out
}

// schedNote describes scheduled event id for the log ("" for an event not
// scheduled). The caller holds l.mu.
func (l *ledger) schedNote(id string) string {
	e, ok := l.sched[id]
	if !ok {
		return ""
	}
	return fmt.Sprintf("; scheduled, apart %v, due %s..%s, moves %d (last committed %d), cancelled %v", e.apart,
		e.bounds[0][0].Format("15:04:05.000"), e.bounds[0][1].Format("15:04:05.000"), len(e.bounds)-1, e.moveN, e.cancelled)
}

// dumpAccount prints the scheduled events of account, to stderr. The caller
// holds l.mu.
func (l *ledger) dumpAccount(account string) {
	for id, e := range l.sched {
		if e.account != account {
			continue
		}
		fmt.Fprintf(os.Stderr, "chaos:   its scheduled version %d: %s%s\n", e.version, id, l.schedNote(id))
		for _, h := range e.history {
			fmt.Fprintf(os.Stderr, "chaos:     %s\n", h)
		}
	}
}

// withoutApart is order without the events of apart.
func withoutApart(order []observed, apart map[string]bool) []observed {
	if len(apart) == 0 {
		return order
	}
	return slices.DeleteFunc(slices.Clone(order), func(o observed) bool { return apart[o.id] })
}

// attemptLog is a relay process's record of its attempts to publish
// scheduled events, a file of its own in the run's directory: a line per
// message, its id, its due time (herald_due_at) and the clock (Unix ns).
type attemptLog struct {
	mu sync.Mutex
	f  *os.File
}

// attemptPrefix begins the names of the relays' attempt logs.
const attemptPrefix = "scheduled-attempts-"

func openAttemptLog(who string) *attemptLog {
	if lockDir == "" {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(lockDir, fmt.Sprintf("%s%s-%d", attemptPrefix, who, os.Getpid())),
		os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil
	}
	return &attemptLog{f: f}
}

// note writes down the scheduled ones of msgs, about to be published now
// (one write: a kill leaves whole lines, or a torn last one the reader
// skips).
func (a *attemptLog) note(msgs []*message.Message) {
	if a == nil {
		return
	}
	now := time.Now().UnixNano()
	var b []byte
	for _, m := range msgs {
		if due := m.Metadata.Get(events.MetaDueAt); due != "" {
			b = fmt.Appendf(b, "%s %s %d\n", m.UUID, due, now)
		}
	}
	if len(b) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, _ = a.f.Write(b)
}

// attempt is one relay's attempt to publish a scheduled event.
type attempt struct {
	due, at time.Time
}

// readAttempts reads the relays' attempt logs.
func readAttempts(dir string) map[string][]attempt {
	out := map[string][]attempt{}
	readLogLines(dir, attemptPrefix, func(line string) {
		fs := strings.Fields(line)
		if len(fs) != 3 {
			return
		}
		due, err1 := time.Parse(time.RFC3339Nano, fs[1])
		ns, err2 := strconv.ParseInt(fs[2], 10, 64)
		if err1 != nil || err2 != nil {
			return
		}
		out[fs[0]] = append(out[fs[0]], attempt{due: due, at: time.Unix(0, ns)})
	})
	return out
}

// schedVerdict is the ledger's judgement of the scheduled events.
type schedVerdict struct {
	scheduled, inLine, apart, keyed int
	cancelled                       int // their cancel committed (the reminders)
	cancelledPublished              int // ... yet attempted, stored, read or applied
	lost                            int // not cancelled, never applied
	early                           int // attempted or read before their due time
	attempts                        int // the relays' attempts to publish scheduled events
	earliest                        time.Duration
	dueWrong                        int // carried a due time not their save's or last committed move's
	dueMissing                      int // read without a due time
	disagree                        int // the reminders disagree with what Cancel and Move returned
	resolved                        int // cancels and moves of unknown outcome, settled by the reminders
	lateness                        []time.Duration
}

func (v schedVerdict) ok() bool {
	return v.cancelledPublished == 0 && v.lost == 0 && v.early == 0 && v.dueWrong == 0 && v.dueMissing == 0 && v.disagree == 0
}

// readReminders reads the reminders: state and last move by event.
func readReminders(q *gorm.DB) (map[string]Reminder, error) {
	var rs []Reminder
	if err := q.Find(&rs).Error; err != nil {
		return nil, fmt.Errorf("ledger: reminders: %w", err)
	}
	out := make(map[string]Reminder, len(rs))
	for _, r := range rs {
		out[r.EventID] = r
	}
	return out, nil
}

// judgeScheduled judges the scheduled events; cancelled are those whose
// cancel committed, by the reminders. The caller holds l.mu.
func (l *ledger) judgeScheduled(rems map[string]Reminder, effects map[string]int, obs *observer, st stored,
	atts map[string][]attempt) (v schedVerdict, cancelled map[string]bool) {
	cancelled = map[string]bool{}
	inStreams := map[string]bool{}
	for _, o := range st.order {
		inStreams[o.id] = true
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	first := true
	var shown map[string]bool
	say := func(n int, format string, args ...any) {
		if n <= 10 {
			fmt.Fprintf(os.Stderr, "chaos: scheduled "+format+"\n", args...)
			id, _ := args[0].(string)
			if shown == nil {
				shown = map[string]bool{}
			}
			if !shown[id] {
				shown[id] = true
				l.dumpScheduled(id, rems, effects, obs, atts)
			}
		}
	}
	for id, e := range l.sched {
		v.scheduled++
		if e.apart {
			v.apart++
		} else {
			v.inLine++
		}
		if e.key != "" {
			v.keyed++
		}
		r, ok := rems[id]
		isCancelled := ok && r.State == "cancelled"
		if !ok || (!e.unknown && (e.cancelled != isCancelled || e.moveN != r.MoveN)) {
			v.disagree++
			say(v.disagree, "%s: reminder %+v (found %v), the writer's cancel %v, last move %d", id, r, ok, e.cancelled, e.moveN)
		}
		if e.unknown {
			v.resolved++
		}
		moveN := e.moveN
		if ok && r.MoveN < len(e.bounds) {
			moveN = r.MoveN
		}
		pos, read := obs.seen[id]
		as := atts[id]
		v.attempts += len(as)
		if isCancelled {
			cancelled[id] = true
			v.cancelled++
			if effects[id] > 0 || read || inStreams[id] || len(as) > 0 {
				v.cancelledPublished++
				say(v.cancelledPublished, "%s cancelled (committed), yet published: effects %d, read %v, stored %v, attempts %d",
					id, effects[id], read, inStreams[id], len(as))
			}
			continue
		}
		if effects[id] == 0 {
			v.lost++
			say(v.lost, "%s lost: read %v, stored %v, attempts %d, reminder %+v", id, read, inStreams[id], len(as), r)
		}
		b := e.bounds[moveN]
		check := func(due time.Time, what string) {
			if due.Before(b[0].Add(-clockSlack)) || due.After(b[1].Add(clockSlack)) {
				v.dueWrong++
				say(v.dueWrong, "%s (%s) due %s, not within %s..%s (move %d)", id, what, due.Format("15:04:05.000000"),
					b[0].Format("15:04:05.000000"), b[1].Format("15:04:05.000000"), moveN)
			}
		}
		for _, a := range as {
			if a.at.Before(a.due.Add(-clockSlack)) || a.at.Before(b[0].Add(-clockSlack)) {
				v.early++
				say(v.early, "%s attempted at %s, due %s (bounds from %s)", id, a.at.Format("15:04:05.000000"),
					a.due.Format("15:04:05.000000"), b[0].Format("15:04:05.000000"))
			}
			if d := a.at.Sub(a.due); first || d < v.earliest {
				v.earliest, first = d, false
			}
		}
		for _, a := range as {
			check(a.due, "attempt")
		}
		if read {
			o := obs.order[pos]
			switch {
			case o.due.IsZero():
				v.dueMissing++
				say(v.dueMissing, "%s read without %s", id, events.MetaDueAt)
			default:
				check(o.due, "read")
				if o.at.Before(o.due.Add(-clockSlack)) {
					v.early++
					say(v.early, "%s read at %s, due %s", id, o.at.Format("15:04:05.000000"), o.due.Format("15:04:05.000000"))
				}
				v.lateness = append(v.lateness, o.at.Sub(o.due))
			}
		}
	}
	return v, cancelled
}

// dumpScheduled prints what is known of scheduled event id, to stderr. The
// caller holds l.mu and obs.mu.
func (l *ledger) dumpScheduled(id string, rems map[string]Reminder, effects map[string]int, obs *observer, atts map[string][]attempt) {
	e := l.sched[id]
	r, ok := rems[id]
	fmt.Fprintf(os.Stderr, "chaos:   %s: account %s, key %q, apart %v; reminder %+v (found %v); effects %d\n", id, e.account, e.key, e.apart, r, ok, effects[id])
	for i, b := range e.bounds {
		fmt.Fprintf(os.Stderr, "chaos:   due bounds %d: %s..%s\n", i, b[0].Format(clockFormat), b[1].Format(clockFormat))
	}
	for _, h := range e.history {
		fmt.Fprintf(os.Stderr, "chaos:   %s\n", h)
	}
	for _, a := range atts[id] {
		fmt.Fprintf(os.Stderr, "chaos:   attempt at %s, due %s\n", a.at.Format(clockFormat), a.due.Format(clockFormat))
	}
	if pos, ok := obs.seen[id]; ok {
		o := obs.order[pos]
		fmt.Fprintf(os.Stderr, "chaos:   read at %s, due %s\n", o.at.Format(clockFormat), o.due.Format(clockFormat))
	}
}

// schedRows adds the scheduled events' rows to the table.
func (s *scheduler) rows(row func(string, any), v schedVerdict) {
	outs := func(c *[outcomes]atomic.Int64) string {
		return fmt.Sprintf("%d, %d, %d / %d / %d / %d, %d, %d", c[outChanged].Load(), c[outUndone].Load(),
			c[outDue].Load(), c[outPublished].Load(), c[outNotSched].Load(), c[outDead].Load(), c[outFailed].Load(), c[outUnknown].Load())
	}
	kinds := "committed, rolled back after it returned nil, too late (ErrDue / ErrPublished / ErrNotScheduled / ErrDead), failed, commit failed (judged by the reminders)"
	row(fmt.Sprintf("scheduled events committed (%d/s, due %v-%v after the save, half by At): in line, apart; keyed", s.rate, schedMin, schedMax),
		fmt.Sprintf("%d: %d, %d; %d", v.scheduled, v.inLine, v.apart, v.keyed))
	row("cancels (Cancel, or CancelKey; with the reminder, 1 in 5 rolled back): "+kinds, outs(&s.cancels))
	row("moves (Move, or MoveKey, to now, At or After; with the reminder, 1 in 5 rolled back): "+kinds, outs(&s.moves))
	row("cancels and moves by key; commits that failed, settled by the reminders", fmt.Sprintf("%d; %d", s.byKey.Load(), v.resolved))
	row("scheduled events whose cancel committed (the reminders), yet attempted, stored, read or applied (must be 0)",
		fmt.Sprintf("%d, %d", v.cancelled, v.cancelledPublished))
	row("scheduled events not cancelled, never applied (must be 0)", v.lost)
	row(fmt.Sprintf("scheduled events attempted by a relay or read before their due time (must be 0; %v allowed): attempts, earliest attempt after the due time", clockSlack),
		fmt.Sprintf("%d: %d, %v", v.early, v.attempts, v.earliest.Round(10*time.Microsecond)))
	row("scheduled events due other than at their save's or last committed move's time, or read without it (must be 0)",
		fmt.Sprintf("%d, %d", v.dueWrong, v.dueMissing))
	row("reminders that disagree with what Cancel and Move returned (must be 0)", v.disagree)
	if n := len(v.lateness); n > 0 {
		slices.Sort(v.lateness)
		q := func(f float64) time.Duration { return v.lateness[min(int(f*float64(n)), n-1)].Round(time.Millisecond) }
		row("due time to the observer's first read, p50 / p90 / p99", fmt.Sprintf("%v / %v / %v", q(0.5), q(0.9), q(0.99)))
	}
}
