package drivertest

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/sqlkit"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

var scheduleTests = []test{
	{"InsertScheduled", testScheduleInsert},
	{"CancelByIDAndKey", testScheduleCancel},
	{"MoveByKey", testScheduleMove},
	{"RescheduleCountsTheRest", testScheduleCounts},
	{"NextDueAndStats", testScheduleNextDueStats},
	{"OrderedClaimConfirms", testScheduleOrderedConfirm},
	{"StatsHeldInLine", testScheduleStatsHeld},
}

// scheduled inserts one event of aggregate ("account", aggID) scheduled by s.
func (e *env) scheduled(aggID string, s store.Schedule) store.Row {
	e.t.Helper()
	ev := event("t", "account", aggID)
	ev.Schedule = s
	n, _, err := e.out.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: []store.Row{ev}})
	must(e.t, err)
	if n != 1 {
		e.t.Fatalf("Insert of a scheduled event inserted %d", n)
	}
	return ev
}

// dueAt is the due time stored in the metadata of event id.
func (e *env) dueAt(id string) time.Time {
	e.t.Helper()
	var raw string
	must(e.t, e.db.QueryRowContext(e.ctx, e.sql.Rebind(`SELECT metadata FROM `+e.q()+` WHERE id = ?`), id).Scan(&raw))
	var md map[string]string
	must(e.t, json.Unmarshal([]byte(raw), &md))
	at, err := time.Parse(time.RFC3339Nano, md[store.MetaDueAt])
	if err != nil {
		e.t.Fatalf("metadata %s of %s: %v", raw, id, err)
	}
	return at
}

// within fails unless d is within a minute of want.
func within(t tb.TB, what string, d, want time.Duration) {
	t.Helper()
	if d < want-time.Minute || d > want+time.Minute {
		t.Fatalf("%s = %v, want about %v", what, d, want)
	}
}

// A scheduled event waits until its time, judged by the database's clock; an
// event scheduled in the past is due at once; each carries its due time in
// its metadata, and several rows of one statement keep their own schedules.
func testScheduleInsert(t tb.TB, e *env) {
	later := e.scheduled("a", store.Schedule{After: time.Hour, Key: "k"})
	at := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Microsecond)
	fixed := e.scheduled("b", store.Schedule{At: at})
	past := e.scheduled("c", store.Schedule{At: time.Now().Add(-time.Hour)})
	plain := e.insert("t", "d", 1)[0]
	mixed := []store.Row{event("t", "account", "e"), event("t", "account", "f")}
	mixed[1].Schedule = store.Schedule{After: time.Hour}
	n, _, err := e.out.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: mixed})
	must(t, err)
	if n != 2 {
		t.Fatalf("Insert of 2 rows, one scheduled, inserted %d", n)
	}
	got := ids(e.claim(10))
	slices.Sort(got)
	want := []string{past.ID, plain.ID, mixed[0].ID}
	slices.Sort(want)
	sameIDs(t, "due events", got, want)
	within(t, "wait of the event due in an hour", e.row(later.ID).wait, time.Hour)
	within(t, "wait of the event due at a time", e.row(fixed.ID).wait, 2*time.Hour)
	within(t, "wait of the second row", e.row(mixed[1].ID).wait, time.Hour)
	within(t, "due time in the metadata", time.Until(e.dueAt(later.ID)), time.Hour)
	if d := e.dueAt(fixed.ID); !d.Equal(at) {
		t.Fatalf("due time in the metadata = %v, want %v", d, at)
	}
}

// Cancel deletes a scheduled event not due yet, by id or by key, and says
// nothing of an event it does not know.
func testScheduleCancel(t tb.TB, e *env) {
	byID := e.scheduled("a", store.Schedule{After: time.Hour})
	k1 := e.scheduled("b", store.Schedule{After: time.Hour, Key: "reminder:b"})
	k2 := e.scheduled("c", store.Schedule{After: 2 * time.Hour, Key: "reminder:b"})
	other := e.scheduled("d", store.Schedule{After: time.Hour, Key: "reminder:d"})
	res, err := e.out.Reschedule(e.ctx, e.db, store.RescheduleParams{ID: byID.ID, Cancel: true})
	must(t, err)
	if res != (store.RescheduleResult{Changed: 1}) {
		t.Fatalf("cancel by id = %+v", res)
	}
	res, err = e.out.Reschedule(e.ctx, e.db, store.RescheduleParams{Key: "reminder:b", Cancel: true})
	must(t, err)
	if res != (store.RescheduleResult{Changed: 2}) {
		t.Fatalf("cancel by key = %+v", res)
	}
	for _, id := range []string{byID.ID, k1.ID, k2.ID} {
		if e.row(id).found {
			t.Fatalf("cancelled event %s is still there", id)
		}
	}
	if !e.row(other.ID).found {
		t.Fatal("the event of another key was cancelled")
	}
	res, err = e.out.Reschedule(e.ctx, e.db, store.RescheduleParams{ID: byID.ID, Cancel: true})
	must(t, err)
	if res != (store.RescheduleResult{}) {
		t.Fatalf("cancel of a cancelled event = %+v", res)
	}
	// In a transaction that rolls back, nothing happened.
	tx, err := e.db.BeginTx(e.ctx, e.drv.LockingTx())
	must(t, err)
	res, err = e.out.Reschedule(e.ctx, tx, store.RescheduleParams{ID: other.ID, Cancel: true})
	must(t, err)
	must(t, tx.Rollback())
	if res.Changed != 1 || !e.row(other.ID).found {
		t.Fatalf("cancel rolled back = %+v, row found %v", res, e.row(other.ID).found)
	}
	// An unscheduled event is no scheduled event.
	plain := e.insert("t", "e", 1)[0]
	res, err = e.out.Reschedule(e.ctx, e.db, store.RescheduleParams{ID: plain.ID, Cancel: true})
	must(t, err)
	if res != (store.RescheduleResult{}) || !e.row(plain.ID).found {
		t.Fatalf("cancel of an unscheduled event = %+v", res)
	}
}

// Move sets the due time of the events of a key; the zero To makes them due
// now; their metadata follows.
func testScheduleMove(t tb.TB, e *env) {
	a := e.scheduled("a", store.Schedule{After: time.Hour, Key: "expire"})
	b := e.scheduled("b", store.Schedule{After: 3 * time.Hour, Key: "expire"})
	res, err := e.out.Reschedule(e.ctx, e.db, store.RescheduleParams{Key: "expire", To: store.Schedule{After: 2 * time.Hour}})
	must(t, err)
	if res != (store.RescheduleResult{Changed: 2}) {
		t.Fatalf("move by key = %+v", res)
	}
	for _, id := range []string{a.ID, b.ID} {
		within(t, "wait after the move", e.row(id).wait, 2*time.Hour)
		within(t, "due time in the metadata after the move", time.Until(e.dueAt(id)), 2*time.Hour)
	}
	if got := e.claim(10); len(got) != 0 {
		t.Fatalf("claimed %v before they are due", ids(got))
	}
	res, err = e.out.Reschedule(e.ctx, e.db, store.RescheduleParams{ID: a.ID})
	must(t, err)
	if res != (store.RescheduleResult{Changed: 1}) {
		t.Fatalf("move to now = %+v", res)
	}
	sameIDs(t, "due after the move to now", ids(e.claim(10)), []string{a.ID})
	within(t, "due time in the metadata after the move to now", time.Until(e.dueAt(a.ID)), 0)
}

// What Reschedule cannot change it counts: due (in flight or retrying),
// published, dead.
func testScheduleCounts(t tb.TB, e *env) {
	due := e.scheduled("a", store.Schedule{At: time.Now().Add(-time.Minute), Key: "k"})
	published := e.scheduled("b", store.Schedule{After: time.Hour, Key: "k"})
	dead := e.scheduled("c", store.Schedule{After: time.Hour, Key: "k"})
	e.stamp(published.ID, "due_at", time.Second)
	e.stamp(published.ID, "processed_at", 0)
	e.stamp(dead.ID, "due_at", time.Second)
	e.kill(dead.ID, 0, "boom")
	waiting := e.scheduled("d", store.Schedule{After: time.Hour, Key: "k"})
	res, err := e.out.Reschedule(e.ctx, e.db, store.RescheduleParams{Key: "k", Cancel: true})
	must(t, err)
	if want := (store.RescheduleResult{Changed: 1, Due: 1, Published: 1, Dead: 1}); res != want {
		t.Fatalf("cancel by key = %+v, want %+v", res, want)
	}
	if e.row(waiting.ID).found || !e.row(due.ID).found || !e.row(published.ID).found || !e.row(dead.ID).found {
		t.Fatal("cancel changed the wrong rows")
	}
	res, err = e.out.Reschedule(e.ctx, e.db, store.RescheduleParams{ID: due.ID, To: store.Schedule{After: time.Hour}})
	must(t, err)
	if res != (store.RescheduleResult{Due: 1}) {
		t.Fatalf("move of a due event = %+v", res)
	}
}

// NextDue is the wait until the earliest pending scheduled event not due
// yet, a retry not counted (one the relay woke for would be claimed alone,
// and its failure never confirmed); Stats counts the scheduled events, the
// next one's wait and the earliest overdue one's age.
func testScheduleNextDueStats(t tb.TB, e *env) {
	if _, ok, err := e.rel.NextDue(e.ctx, e.db); err != nil || ok {
		t.Fatalf("NextDue of an empty outbox = %v, %v", ok, err)
	}
	retry := e.insert("t", "x", 1)[0]
	e.exec(`UPDATE `+e.q()+` SET attempts = 1 WHERE id = ?`, retry.ID)
	e.stamp(retry.ID, "available_at", -10*time.Minute)
	if d, ok, err := e.rel.NextDue(e.ctx, e.db); err != nil || ok {
		t.Fatalf("NextDue with only a retry pending = %v, %v, %v; want none", d, ok, err)
	}
	a := e.scheduled("a", store.Schedule{After: 2 * time.Hour})
	e.scheduled("b", store.Schedule{After: time.Hour})
	e.stamp(a.ID, "created_at", 3*time.Hour) // saved long ago, still not due
	d, ok, err := e.rel.NextDue(e.ctx, e.db)
	must(t, err)
	if !ok {
		t.Fatal("NextDue found nothing")
	}
	within(t, "NextDue", d, time.Hour)
	s, err := e.rel.Stats(e.ctx, e.db)
	must(t, err)
	if s.Scheduled != 2 || s.Overdue != 0 || s.OldestPending > time.Minute {
		t.Fatalf("Stats = %+v, want 2 scheduled, none overdue, no event waiting long (one not due is not late)", s)
	}
	within(t, "NextScheduled", s.NextScheduled, time.Hour)
	late := e.scheduled("c", store.Schedule{After: time.Hour})
	e.stamp(late.ID, "created_at", 20*time.Minute)
	e.stamp(late.ID, "due_at", 10*time.Minute)
	e.stamp(late.ID, "available_at", 10*time.Minute)
	s, err = e.rel.Stats(e.ctx, e.db)
	must(t, err)
	if s.Scheduled != 3 {
		t.Fatalf("Stats.Scheduled = %d, want 3", s.Scheduled)
	}
	within(t, "Overdue", s.Overdue, 10*time.Minute)
	within(t, "OldestPending, from the due time", s.OldestPending, 10*time.Minute)
}

// An ordered claim reads without locks: a scheduled event that a writer
// deleted (a cancel before it came due) in a transaction still open when the
// claim reads is confirmed before it is returned, and held back with the
// later events of its aggregate, so none goes first; another aggregate's
// events are returned (they do not wait for that transaction).
func testScheduleOrderedConfirm(t tb.TB, e *env) {
	first := e.insert("t", "a", 1)[0]
	sched := e.scheduled("a", store.Schedule{At: time.Now().Add(-time.Second)})
	after := e.insert("t", "a", 1)[0]
	other := e.insert("t", "b", 1)[0]
	tx, err := e.db.BeginTx(e.ctx, e.drv.LockingTx())
	must(t, err)
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(e.ctx, e.sql.Rebind(`DELETE FROM `+e.q()+` WHERE id = ?`), sched.ID); err != nil {
		t.Fatal(err)
	}
	// SQLite's confirmation waits for the writer: it commits soon.
	done := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		done <- tx.Commit()
	}()
	b := e.ordered(100, 1, []int32{0}, nil)
	b.Close()
	sameIDs(t, "ordered claim while the cancel is open", ids(b.Rows()), []string{first.ID, other.ID})
	must(t, <-done)
	b = e.ordered(100, 1, []int32{0}, nil)
	b.Close()
	sameIDs(t, "ordered claim after the cancel", ids(b.Rows()), []string{first.ID, after.ID, other.ID})
}

// OldestUnheld leaves out the events an ordered relay holds in line: those
// behind a pending event of their aggregate scheduled in line (Stats'
// OldestPending counts them, for unordered relays). An event
// before the scheduled one, another aggregate's, and one behind an event
// scheduled apart (no aggregate) are not held. Once the scheduled event is
// due it is counted itself, from its due time, for its line. More held
// events than sqlkit.UnheldLimits' first, older than every other, are
// looked past.
func testScheduleStatsHeld(t tb.TB, e *env) {
	unheld := func() time.Duration {
		t.Helper()
		age, err := e.rel.OldestUnheld(e.ctx, e.db)
		must(t, err)
		return age
	}
	before := e.insert("t", "a", 1)[0]
	sched := e.scheduled("a", store.Schedule{After: time.Hour})
	held := e.insert("t", "a", 2)
	apart := e.scheduled("", store.Schedule{After: time.Hour})
	other := e.insert("t", "b", 1)[0]
	e.stamp(before.ID, "created_at", 20*time.Minute)
	e.stamp(held[0].ID, "created_at", 3*time.Hour)
	e.stamp(held[1].ID, "created_at", 3*time.Hour)
	e.stamp(apart.ID, "created_at", 5*time.Hour) // not due: not late
	e.stamp(other.ID, "created_at", 30*time.Minute)
	s, err := e.rel.Stats(e.ctx, e.db)
	must(t, err)
	if s.Pending != 6 {
		t.Fatalf("Stats = %+v, want 6 pending", s)
	}
	within(t, "OldestPending, the held events counted", s.OldestPending, 3*time.Hour)
	within(t, "OldestUnheld", unheld(), 30*time.Minute)

	// Nothing but held events: none late.
	e.exec(`DELETE FROM `+e.q()+` WHERE id IN (?, ?)`, before.ID, other.ID)
	if age := unheld(); age != 0 {
		t.Fatalf("OldestUnheld = %v, want 0", age)
	}
	// More held events than the first look takes, older than another.
	many := e.insert("t", "a", sqlkit.UnheldLimits[0]+10)
	e.exec(`UPDATE `+e.q()+` SET created_at = (SELECT created_at FROM `+e.q()+` WHERE id = ?) WHERE aggregate_id = 'a' AND due_at IS NULL`, held[0].ID)
	late := e.insert("t", "c", 1)[0]
	e.stamp(late.ID, "created_at", 40*time.Minute)
	s, err = e.rel.Stats(e.ctx, e.db)
	must(t, err)
	if s.Pending != int64(5+len(many)) {
		t.Fatalf("Stats.Pending = %d, want %d", s.Pending, 5+len(many))
	}
	within(t, "OldestUnheld behind many held", unheld(), 40*time.Minute)

	// The scheduled event came due 10 minutes ago: it counts from then.
	e.exec(`DELETE FROM `+e.q()+` WHERE id = ?`, late.ID)
	e.stamp(sched.ID, "created_at", 4*time.Hour)
	e.stamp(sched.ID, "due_at", 10*time.Minute)
	e.stamp(sched.ID, "available_at", 10*time.Minute)
	s, err = e.rel.Stats(e.ctx, e.db)
	must(t, err)
	within(t, "OldestPending after the due time", s.OldestPending, 3*time.Hour)
	within(t, "OldestUnheld after the due time, from it", unheld(), 10*time.Minute)
}
