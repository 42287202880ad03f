package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/store"
)

// schedEnv is a test's SQLite file with the default outbox and the relay's
// additions of ordered mode.
type schedEnv struct {
	t   *testing.T
	ctx context.Context
	db  *sql.DB
	tbl ident.Table
	o   *outbox
	r   *relay
}

func newSchedEnv(t *testing.T) *schedEnv {
	t.Helper()
	db, err := sql.Open("sqlite", DSN(filepath.Join(t.TempDir(), "herald.db"))+"&_pragma=synchronous(NORMAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	e := &schedEnv{t: t, ctx: context.Background(), db: db, tbl: ident.MustTable(store.DefaultOutbox)}
	e.o, e.r = newOutbox(e.tbl), newRelay(e.tbl)
	e.must(e.o.Create(e.ctx, db))
	e.must(e.r.Create(e.ctx, db, store.RelayCreateParams{Ordered: true, Retention: true}))
	e.must(e.r.Create(e.ctx, db, store.RelayCreateParams{Retention: true})) // the claims table
	return e
}

func (e *schedEnv) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// event is a new event of its own aggregate, scheduled by s.
func event(s store.Schedule) store.Row {
	return store.Row{ID: uuid.NewString(), Type: "t", Version: 1, AggregateType: "account", AggregateID: uuid.NewString(),
		Topic: "t", Payload: []byte(`{}`), Metadata: []byte(`{"trace": "x"}`), OccurredAt: time.Now(), Schedule: s}
}

// insert inserts evs in one statement.
func (e *schedEnv) insert(evs ...store.Row) {
	e.t.Helper()
	n, _, err := e.o.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: evs})
	e.must(err)
	if n != int64(len(evs)) {
		e.t.Fatalf("Insert inserted %d of %d", n, len(evs))
	}
}

// sched is a row's scheduling columns, its times relative to the database's
// clock when read.
type sched struct {
	due, avail    time.Duration // due_at, available_at - now
	dueSet        bool
	key, meta     string
	dueAt, avail0 int64
}

func (e *schedEnv) row(id string) sched {
	e.t.Helper()
	var (
		s   sched
		due sql.NullInt64
		now int64
	)
	e.must(e.db.QueryRowContext(e.ctx, `SELECT due_at, available_at, schedule_key, metadata, `+Now+` FROM `+e.tbl.Quoted()+` WHERE id = ?`, id).
		Scan(&due, &s.avail0, &s.key, &s.meta, &now))
	s.dueSet, s.dueAt = due.Valid, due.Int64
	s.due = time.Duration(due.Int64-now) * time.Microsecond
	s.avail = time.Duration(s.avail0-now) * time.Microsecond
	return s
}

// migration is the text of the migration file name.
func (e *schedEnv) migration(name string) string {
	e.t.Helper()
	b, err := fs.ReadFile(Migrations(), name)
	e.must(err)
	return string(b)
}

func (e *schedEnv) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := e.db.ExecContext(e.ctx, q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

var dueAtFormat = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

// checkMeta checks that s's metadata keeps its key and holds its due time.
func (e *schedEnv) checkMeta(s sched) {
	e.t.Helper()
	var md map[string]any
	e.must(json.Unmarshal([]byte(s.meta), &md))
	if md["trace"] != "x" {
		e.t.Errorf("metadata %s lost its key", s.meta)
	}
	text, _ := md[store.MetaDueAt].(string)
	if !dueAtFormat.MatchString(text) {
		e.t.Fatalf("metadata %s: %s = %q, want RFC 3339 UTC with 6 fractional digits", s.meta, store.MetaDueAt, text)
	}
	at, err := time.Parse(time.RFC3339Nano, text)
	e.must(err)
	if at.UnixMicro() != s.dueAt {
		e.t.Errorf("%s = %s (%d), due_at %d", store.MetaDueAt, text, at.UnixMicro(), s.dueAt)
	}
}

func near(got, want time.Duration) bool {
	d := got - want
	return d > -2*time.Second && d < 2*time.Second
}

func TestScheduledInsert(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	plain, atEv, past := event(store.Schedule{}), event(store.Schedule{At: at}), event(store.Schedule{At: time.Now().Add(-time.Hour)})
	after, keyed := event(store.Schedule{After: 30 * time.Minute, Key: "k1"}), event(store.Schedule{Key: "k2"})
	e.insert(plain, atEv, past, after, keyed)

	p := e.row(plain.ID)
	if p.dueSet || p.key != "" || p.meta != `{"trace": "x"}` || p.avail > 0 {
		t.Errorf("unscheduled row: %+v", p)
	}
	s := e.row(atEv.ID)
	if !s.dueSet || s.dueAt != at.UnixMicro() || s.avail0 != s.dueAt || s.key != "" {
		t.Errorf("At: %+v, want due_at = available_at = %d", s, at.UnixMicro())
	}
	e.checkMeta(s)
	if s = e.row(past.ID); !s.dueSet || s.avail0 != s.dueAt || !near(s.due, 0) {
		t.Errorf("At past: %+v, want due at the insert", s)
	}
	e.checkMeta(s)
	if s = e.row(after.ID); !near(s.due, 30*time.Minute) || s.avail0 != s.dueAt || s.key != "k1" {
		t.Errorf("After: %+v", s)
	}
	e.checkMeta(s)
	if s = e.row(keyed.ID); !s.dueSet || !near(s.due, 0) || s.key != "k2" {
		t.Errorf("Key alone: %+v, want scheduled, due now", s)
	}
	e.checkMeta(s)

	// The same ids again: left alone.
	n, _, err := e.o.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: []store.Row{plain, atEv}})
	e.must(err)
	if n != 0 {
		t.Errorf("Insert of existing ids inserted %d", n)
	}
	// Insertion order is kept (seq).
	var order []string
	rows, err := e.db.QueryContext(e.ctx, `SELECT id FROM `+e.tbl.Quoted()+` ORDER BY seq`)
	e.must(err)
	for rows.Next() {
		var id string
		e.must(rows.Scan(&id))
		order = append(order, id)
	}
	e.must(rows.Err())
	if want := []string{plain.ID, atEv.ID, past.ID, after.ID, keyed.ID}; len(order) != len(want) || order[1] != want[1] || order[4] != want[4] {
		t.Errorf("seq order %v, want %v", order, want)
	}
}

func TestReschedule(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	a := event(store.Schedule{After: time.Hour, Key: "k"})
	b := event(store.Schedule{After: 2 * time.Hour, Key: "k"})
	due := event(store.Schedule{Key: "k"}) // due now
	pub := event(store.Schedule{After: time.Hour, Key: "k"})
	dead := event(store.Schedule{After: time.Hour, Key: "k"})
	other := event(store.Schedule{After: time.Hour, Key: "other"})
	plain := event(store.Schedule{})
	e.insert(a, b, due, pub, dead, other, plain)
	e.exec(`UPDATE `+e.tbl.Quoted()+` SET processed_at = `+Now+` WHERE id = ?`, pub.ID)
	e.exec(`UPDATE `+e.tbl.Quoted()+` SET dead_at = `+Now+` WHERE id = ?`, dead.ID)

	resched := func(p store.RescheduleParams) store.RescheduleResult {
		t.Helper()
		tx, err := e.db.BeginTx(e.ctx, nil)
		e.must(err)
		defer func() { _ = tx.Rollback() }()
		res, err := e.o.Reschedule(e.ctx, tx, p)
		e.must(err)
		e.must(tx.Commit())
		return res
	}
	check := func(name string, got, want store.RescheduleResult) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %+v, want %+v", name, got, want)
		}
	}

	// Move by key: a and b move; due, pub and dead are counted.
	to := time.Now().Add(3 * time.Hour).Truncate(time.Microsecond)
	check("move by key", resched(store.RescheduleParams{Key: "k", To: store.Schedule{At: to}}),
		store.RescheduleResult{Changed: 2, Due: 1, Published: 1, Dead: 1})
	for _, id := range []string{a.ID, b.ID} {
		s := e.row(id)
		if s.dueAt != to.UnixMicro() || s.avail0 != s.dueAt || s.key != "k" {
			t.Errorf("moved row: %+v, want due at %d", s, to.UnixMicro())
		}
		e.checkMeta(s)
	}
	if s := e.row(other.ID); !near(s.due, time.Hour) {
		t.Errorf("another key's row moved: %+v", s)
	}
	// Move by id, After.
	check("move by id", resched(store.RescheduleParams{ID: b.ID, To: store.Schedule{After: 10 * time.Minute}}),
		store.RescheduleResult{Changed: 1})
	if s := e.row(b.ID); !near(s.due, 10*time.Minute) || s.avail0 != s.dueAt {
		t.Errorf("moved row: %+v, want due in 10 min", s)
	} else {
		e.checkMeta(s)
	}
	// Too late for the due one, by id.
	check("cancel due by id", resched(store.RescheduleParams{ID: due.ID, Cancel: true}), store.RescheduleResult{Due: 1})
	check("cancel published by id", resched(store.RescheduleParams{ID: pub.ID, Cancel: true}), store.RescheduleResult{Published: 1})
	// An unscheduled event, and one that does not exist, are in none.
	check("cancel unscheduled", resched(store.RescheduleParams{ID: plain.ID, Cancel: true}), store.RescheduleResult{})
	check("cancel missing", resched(store.RescheduleParams{ID: uuid.NewString(), Cancel: true}), store.RescheduleResult{})
	check("cancel empty key", resched(store.RescheduleParams{Key: "", Cancel: true}), store.RescheduleResult{})
	// Cancel by id, then by key.
	check("cancel by id", resched(store.RescheduleParams{ID: a.ID, Cancel: true}), store.RescheduleResult{Changed: 1})
	if s := e.row(b.ID); !s.dueSet {
		t.Fatal("cancel by id deleted another")
	}
	check("cancel by key", resched(store.RescheduleParams{Key: "k", Cancel: true}),
		store.RescheduleResult{Changed: 1, Due: 1, Published: 1, Dead: 1})
	var n int
	e.must(e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM `+e.tbl.Quoted()+` WHERE id IN (?, ?)`, a.ID, b.ID).Scan(&n))
	if n != 0 {
		t.Errorf("%d cancelled rows left", n)
	}

	// A scheduled event due and held by an unordered claim is due, not
	// changeable; the zero To moves to now.
	c, d := event(store.Schedule{Key: "c"}), event(store.Schedule{After: time.Hour, Key: "d"})
	e.insert(c, d)
	rows, _, err := e.r.claimHeld(e.ctx, e.db, 10, time.Hour)
	e.must(err)
	if len(rows) != 3 { // due, plain and c
		t.Fatalf("leased claim took %d rows, want 3", len(rows))
	}
	check("move leased", resched(store.RescheduleParams{Key: "c", To: store.Schedule{After: time.Hour}}), store.RescheduleResult{Due: 1})
	check("move to now", resched(store.RescheduleParams{Key: "d"}), store.RescheduleResult{Changed: 1})
	if s := e.row(d.ID); !near(s.due, 0) || s.avail0 != s.dueAt {
		t.Errorf("moved to now: %+v", s)
	}
	check("move due", resched(store.RescheduleParams{Key: "d", To: store.Schedule{After: time.Hour}}), store.RescheduleResult{Due: 1})
}

func TestNextDueAndStats(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	if d, ok, err := e.r.NextDue(e.ctx, e.db); err != nil || ok || d != 0 {
		t.Fatalf("NextDue of an empty outbox = %v, %v, %v", d, ok, err)
	}
	s, err := e.r.Stats(e.ctx, e.db)
	e.must(err)
	if s.Scheduled != 0 || s.NextScheduled != 0 || s.Overdue != 0 {
		t.Errorf("Stats of an empty outbox: %+v", s)
	}

	soon, later, overdue, plain := event(store.Schedule{After: 20 * time.Minute}), event(store.Schedule{At: time.Now().Add(time.Hour)}),
		event(store.Schedule{Key: "o"}), event(store.Schedule{})
	e.insert(soon, later, overdue, plain)
	if d, ok, err := e.r.NextDue(e.ctx, e.db); err != nil || !ok || !near(d, 20*time.Minute) {
		t.Errorf("NextDue = %v, %v, %v, want about 20 min", d, ok, err)
	}
	e.exec(`UPDATE `+e.tbl.Quoted()+` SET due_at = `+Now+` - 90000000, available_at = `+Now+` - 90000000 WHERE id = ?`, overdue.ID)
	// A retry waiting 5 min does not count: the relay finds it at a poll.
	e.exec(`UPDATE `+e.tbl.Quoted()+` SET attempts = 1, available_at = `+Now+` + 300000000 WHERE id = ?`, plain.ID)
	if d, ok, err := e.r.NextDue(e.ctx, e.db); err != nil || !ok || !near(d, 20*time.Minute) {
		t.Errorf("NextDue = %v, %v, %v, want about 20 min (the retry not counted)", d, ok, err)
	}
	s, err = e.r.Stats(e.ctx, e.db)
	e.must(err)
	if s.Pending != 4 || s.Failing != 1 || s.Scheduled != 3 || !near(s.NextScheduled, 20*time.Minute) || !near(s.Overdue, 90*time.Second) {
		t.Errorf("Stats = %+v, want 4 pending, 1 failing, 3 scheduled, next in 20 min, 90 s overdue", s)
	}
	// Published and dead scheduled events are not counted.
	e.exec(`UPDATE `+e.tbl.Quoted()+` SET processed_at = `+Now+` WHERE id = ?`, soon.ID)
	e.exec(`UPDATE `+e.tbl.Quoted()+` SET dead_at = `+Now+` WHERE id = ?`, overdue.ID)
	s, err = e.r.Stats(e.ctx, e.db)
	e.must(err)
	if s.Scheduled != 1 || !near(s.NextScheduled, time.Hour) || s.Overdue != 0 {
		t.Errorf("Stats = %+v, want 1 scheduled, next in 1 h, none overdue", s)
	}
}

// The ordered claim reads without locks: a scheduled event that a Reschedule
// cancelled or moved after the read is found by confirm, which leaves it and
// its aggregate's later events out of the batch.
func TestOrderedClaimConfirmsScheduledEvents(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	claim := func() []store.Row {
		t.Helper()
		rows, err := e.r.claimOrdered(e.ctx, e.db, 100, 1, []int32{0})
		e.must(err)
		return rows
	}
	p1, s2, p3, s4 := event(store.Schedule{}), event(store.Schedule{Key: "s2"}), event(store.Schedule{}), event(store.Schedule{Key: "s4"})
	p3.AggregateID = s2.AggregateID // in line behind s2
	e.insert(p1, s2, p3, s4)
	rows := claim()
	if len(rows) != 4 || rows[0].Scheduled || !rows[1].Scheduled || rows[2].Scheduled || !rows[3].Scheduled {
		t.Fatalf("ordered claim: %+v, want the 4 rows, the 2nd and 4th scheduled", rows)
	}

	// Deleted after the read: it and its aggregate's later event are left
	// out, the other aggregates' rows kept.
	e.exec(`DELETE FROM `+e.tbl.Quoted()+` WHERE id = ?`, s2.ID)
	got, err := e.r.confirm(e.ctx, e.db, rows)
	e.must(err)
	if len(got) != 2 || got[0].ID != p1.ID || got[1].ID != s4.ID {
		t.Fatalf("confirm after a delete kept %d rows, want p1, s4", len(got))
	}
	// Moved after the read (not due any more).
	rows = claim()
	e.exec(`UPDATE `+e.tbl.Quoted()+` SET due_at = `+Now+` + 3600000000, available_at = `+Now+` + 3600000000 WHERE id = ?`, s4.ID)
	got, err = e.r.confirm(e.ctx, e.db, rows)
	e.must(err)
	if len(got) != 2 || got[0].ID != p1.ID || got[1].ID != p3.ID {
		t.Fatalf("confirm after a move kept %d rows, want p1, p3", len(got))
	}
}

// A Reschedule that cancelled a scheduled event just before it came due, in
// a transaction still open when an ordered claim reads it due, keeps the
// claim waiting (its confirm wants the write lock) until it commits; the claim
// then leaves the event out.
func TestOrderedClaimWaitsForReschedule(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	ev, after := event(store.Schedule{After: 300 * time.Millisecond, Key: "s"}), event(store.Schedule{})
	after.AggregateID = ev.AggregateID // in line behind ev
	e.insert(ev, after)
	tx, err := e.db.BeginTx(e.ctx, nil)
	e.must(err)
	defer func() { _ = tx.Rollback() }()
	res, err := e.o.Reschedule(e.ctx, tx, store.RescheduleParams{Key: "s", Cancel: true})
	e.must(err)
	if res.Changed != 1 {
		t.Fatalf("Reschedule = %+v, want 1 changed", res)
	}
	time.Sleep(400 * time.Millisecond) // due by now, for a reader
	type result struct {
		rows []store.Row
		err  error
	}
	done := make(chan result, 1)
	go func() {
		rows, err := e.r.claimOrdered(e.ctx, e.db, 100, 1, []int32{0})
		done <- result{rows, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("ordered claim did not wait for the open Reschedule: %d rows, %v", len(r.rows), r.err)
	case <-time.After(300 * time.Millisecond):
	}
	e.must(tx.Commit())
	r := <-done
	e.must(r.err)
	if len(r.rows) != 0 {
		t.Fatalf("ordered claim returned %d rows, want none (the batch ends before the cancelled event)", len(r.rows))
	}
	rows, err := e.r.claimOrdered(e.ctx, e.db, 100, 1, []int32{0})
	e.must(err)
	if len(rows) != 1 || rows[0].ID != after.ID {
		t.Fatalf("next ordered claim: %d rows, want the later event", len(rows))
	}
}

// Create makes the columns and indexes of 0006_schedule; an outbox without
// them (0006's down) is left alone by Create and is outdated, naming the
// migration, until its up runs.
func TestScheduleMigration(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	file := e.migration
	for _, idx := range []string{"outbox_messages_schedule_key_idx", "outbox_messages_scheduled_idx"} {
		if ok, err := exists(e.ctx, e.db, ident.Table{Name: ident.Name(idx)}); err != nil || !ok {
			t.Fatalf("Create made no %s (%v)", idx, err)
		}
	}
	e.must(e.o.Check(e.ctx, e.db))
	e.exec(file("0009_blockers_idx.down.sql")) // as goose would first: its index is on due_at
	e.exec(file("0006_schedule.down.sql"))
	// Self-creation leaves the outdated table alone (its indexes need the
	// columns it does not add), for the check to name the migration.
	e.must(e.o.Create(e.ctx, e.db))
	e.must(e.r.Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true, Retention: true}))
	for _, check := range []func() error{
		func() error { return e.o.Check(e.ctx, e.db) },
		func() error { return e.r.Check(e.ctx, e.db, store.RelayCheckParams{Ordered: true}) },
	} {
		if err := check(); !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), "0006_schedule") {
			t.Fatalf("Check without 0006 = %v, want ErrSchemaOutdated naming 0006_schedule", err)
		}
	}
	e.exec(file("0006_schedule.up.sql"))
	e.exec(file("0009_blockers_idx.up.sql"))
	e.must(e.o.Check(e.ctx, e.db))
	e.insert(event(store.Schedule{Key: "k"}))
}
