package mysql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/store/mysql"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// scheduleEnv is a test's database with the default outbox (and the relay's
// tables) created.
type scheduleEnv struct {
	t   *testing.T
	ctx context.Context
	db  *sql.DB
	out store.Outbox
	rel store.Relay
}

var outboxTable = ident.MustTable(store.DefaultOutbox)

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", mysqltest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func newScheduleEnv(t *testing.T) *scheduleEnv {
	t.Helper()
	e := &scheduleEnv{t: t, ctx: context.Background(), db: openDB(t),
		out: mysql.Driver{}.Outbox(outboxTable), rel: mysql.Driver{}.Relay(outboxTable)}
	if err := e.out.Create(e.ctx, e.db); err != nil {
		t.Fatal(err)
	}
	if err := e.rel.Create(e.ctx, e.db, store.RelayCreateParams{Ordered: true, Retention: true}); err != nil {
		t.Fatal(err)
	}
	return e
}

// event is an event of aggregate ("account", aggID) scheduled by s.
func event(aggID string, s store.Schedule) store.Row {
	return store.Row{ID: uuid.NewString(), Type: "t", Version: 1, AggregateType: "account", AggregateID: aggID, Topic: "t",
		Payload: []byte(`{}`), Metadata: []byte(`{"trace":"abc"}`), OccurredAt: time.Now().UTC(), Schedule: s}
}

func (e *scheduleEnv) insert(evs ...store.Row) {
	e.t.Helper()
	n, _, err := e.out.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: evs})
	if err != nil {
		e.t.Fatal(err)
	}
	if n != int64(len(evs)) {
		e.t.Fatalf("Insert inserted %d of %d", n, len(evs))
	}
}

// metadata reads the stored metadata of event id.
func (e *scheduleEnv) metadata(id string) map[string]string {
	e.t.Helper()
	var raw string
	if err := e.db.QueryRowContext(e.ctx, "SELECT metadata FROM `outbox_messages` WHERE id = ?", id).Scan(&raw); err != nil {
		e.t.Fatal(err)
	}
	md := map[string]string{}
	if err := json.Unmarshal([]byte(raw), &md); err != nil {
		e.t.Fatalf("metadata %q: %v", raw, err)
	}
	return md
}

func (e *scheduleEnv) ordered() []store.Row {
	e.t.Helper()
	b, err := e.rel.Claim(e.ctx, e.db, store.ClaimParams{Limit: 100, Ordered: &store.OrderedClaim{Partitions: 1, Owned: []int32{0}}})
	if err != nil {
		e.t.Fatal(err)
	}
	b.Close()
	return b.Rows()
}

func rowIDs(rows []store.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

var dueAtFormat = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

// The due time in the metadata is RFC 3339 UTC with six fractional digits,
// the event's own keys kept (empty metadata made an object); a schedule of a
// key alone is due at once, yet scheduled (the ordered claim reads it so);
// a key longer than its column is refused before the statement.
func TestScheduledInsertMetadata(t *testing.T) {
	t.Parallel()
	e := newScheduleEnv(t)
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	fixed := event("a", store.Schedule{At: at})
	bare := event("b", store.Schedule{After: time.Minute})
	bare.Metadata = nil
	now := event("c", store.Schedule{Key: "only-a-key"})
	e.insert(fixed, bare, now)
	md := e.metadata(fixed.ID)
	if md["trace"] != "abc" || md[store.MetaDueAt] != at.Format("2006-01-02T15:04:05.000000Z") {
		t.Fatalf("metadata = %v, want trace abc and due at %v", md, at)
	}
	if d := e.metadata(bare.ID)[store.MetaDueAt]; !dueAtFormat.MatchString(d) {
		t.Fatalf("due time %q of an event without metadata", d)
	}
	got := e.ordered()
	if len(got) != 1 || got[0].ID != now.ID || !got[0].Scheduled {
		t.Fatalf("ordered claim = %+v, want the event of a key alone, scheduled", got)
	}
	var key string
	if err := e.db.QueryRowContext(e.ctx, "SELECT schedule_key FROM `outbox_messages` WHERE id = ?", now.ID).Scan(&key); err != nil || key != "only-a-key" {
		t.Fatalf("schedule_key = %q, %v", key, err)
	}
	long := event("d", store.Schedule{After: time.Minute, Key: strings.Repeat("k", 256)})
	if _, _, err := e.out.Insert(e.ctx, e.db, store.OutboxInsertParams{Rows: []store.Row{long}}); !errors.Is(err, mysql.ErrTooLong) {
		t.Fatalf("insert of a 256-character key: %v", err)
	}
}

// An event named by its id and by its key is changed once and counted
// once; a Reschedule at REPEATABLE READ (the session's default) works as at
// READ COMMITTED.
func TestRescheduleByIDAndKey(t *testing.T) {
	t.Parallel()
	e := newScheduleEnv(t)
	a, b := event("a", store.Schedule{After: time.Hour, Key: "k"}), event("b", store.Schedule{After: time.Hour, Key: "k"})
	due := event("c", store.Schedule{At: time.Now().Add(-time.Hour), Key: "k"})
	e.insert(a, b, due)
	tx, err := e.db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := e.out.Reschedule(e.ctx, tx, store.RescheduleParams{ID: a.ID, Key: "k", To: store.Schedule{After: 2 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.RescheduleResult{Changed: 2, Due: 1}); res != want {
		t.Fatalf("move by id and key = %+v, want %+v", res, want)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var moved int
	if err := e.db.QueryRowContext(e.ctx, "SELECT COUNT(*) FROM `outbox_messages` WHERE due_at = available_at AND due_at > "+mysql.Now+" + INTERVAL 90 MINUTE").Scan(&moved); err != nil || moved != 2 {
		t.Fatalf("%d events moved two hours on, %v", moved, err)
	}
	if res, err := e.out.Reschedule(e.ctx, e.db, store.RescheduleParams{}); err != nil || res != (store.RescheduleResult{}) {
		t.Fatalf("a Reschedule naming nothing = %+v, %v", res, err)
	}
}

// A due scheduled event a relay's unordered claim holds is too late to
// change: Reschedule says so at once, without waiting for the batch.
func TestRescheduleOfAClaimedEventDoesNotWait(t *testing.T) {
	t.Parallel()
	e := newScheduleEnv(t)
	ev := event("a", store.Schedule{At: time.Now().Add(-time.Second), Key: "k"})
	e.insert(ev)
	b, err := e.rel.Claim(e.ctx, e.db, store.ClaimParams{Limit: 10, Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(b.Rows()) != 1 {
		t.Fatalf("claimed %d events", len(b.Rows()))
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	var res store.RescheduleResult
	err = sqlkit.InTx(ctx, e.db, mysql.Driver{}.LockingTx(), func(tx store.Execer) error {
		var err error
		res, err = e.out.Reschedule(ctx, tx, store.RescheduleParams{Key: "k", Cancel: true})
		return err
	})
	if err != nil || res != (store.RescheduleResult{Due: 1}) {
		t.Fatalf("Reschedule of a claimed event = %+v, %v; want one due", res, err)
	}
}

// A scheduled event not due yet that another transaction's Reschedule
// holds makes Reschedule wait for that transaction, at READ COMMITTED and
// REPEATABLE READ; once the other cancel commits, there is nothing left to
// change.
func TestRescheduleWaitsForAnotherReschedule(t *testing.T) {
	t.Parallel()
	for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
		t.Run(iso.String(), func(t *testing.T) {
			e := newScheduleEnv(t)
			ev := event("a", store.Schedule{After: time.Hour, Key: "k"})
			e.insert(ev)
			first, err := e.db.BeginTx(e.ctx, mysql.Driver{}.LockingTx())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = first.Rollback() }()
			if res, err := e.out.Reschedule(e.ctx, first, store.RescheduleParams{ID: ev.ID, Cancel: true}); err != nil || res.Changed != 1 {
				t.Fatalf("first cancel = %+v, %v", res, err)
			}
			type result struct {
				res store.RescheduleResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				var r result
				r.err = sqlkit.InTx(e.ctx, e.db, &sql.TxOptions{Isolation: iso}, func(tx store.Execer) error {
					var err error
					r.res, err = e.out.Reschedule(e.ctx, tx, store.RescheduleParams{Key: "k", Cancel: true})
					return err
				})
				done <- r
			}()
			select {
			case r := <-done:
				t.Fatalf("Reschedule did not wait for the other one: %+v, %v", r.res, r.err)
			case <-time.After(300 * time.Millisecond):
			}
			if err := first.Commit(); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.res.Changed != 0 {
				t.Fatalf("Reschedule after the other cancel = %+v, %v; want nothing changed", r.res, r.err)
			}
		})
	}
}

// The race the ordered claim's confirmation closes: a cancel that locked and
// deleted an event before it came due, in a transaction still open when the
// event's time has passed; the claim, which reads without locks, sees the
// event due, and the batch ends before it. When the cancel rolls back, the
// event is claimed in its place.
func TestOrderedClaimSkipsAnEventBeingCancelled(t *testing.T) {
	t.Parallel()
	e := newScheduleEnv(t)
	first := event("a", store.Schedule{})
	sched := event("a", store.Schedule{At: time.Now().Add(500 * time.Millisecond), Key: "k"})
	e.insert(first, sched)
	after := event("a", store.Schedule{})
	e.insert(after)
	tx, err := e.db.BeginTx(e.ctx, mysql.Driver{}.LockingTx())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := e.out.Reschedule(e.ctx, tx, store.RescheduleParams{Key: "k", Cancel: true})
	if err != nil || res != (store.RescheduleResult{Changed: 1}) {
		t.Fatalf("cancel = %+v, %v", res, err)
	}
	time.Sleep(time.Until(sched.Schedule.At) + 100*time.Millisecond)
	if got := rowIDs(e.ordered()); len(got) != 1 || got[0] != first.ID {
		t.Fatalf("ordered claim while the cancel is open = %v, want %v alone", got, first.ID)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	got := e.ordered()
	if ids := rowIDs(got); len(ids) != 3 || ids[0] != first.ID || ids[1] != sched.ID || ids[2] != after.ID {
		t.Fatalf("ordered claim after the rollback = %v", ids)
	}
	if got[0].Scheduled || !got[1].Scheduled || got[2].Scheduled {
		t.Fatalf("Scheduled of the claimed rows = %v, %v, %v", got[0].Scheduled, got[1].Scheduled, got[2].Scheduled)
	}
}

// Stats and NextDue leave out what is not pending: a published or dead
// scheduled event is neither scheduled, next nor overdue.
func TestScheduledFiguresArePending(t *testing.T) {
	t.Parallel()
	e := newScheduleEnv(t)
	published, dead := event("a", store.Schedule{After: time.Minute}), event("b", store.Schedule{After: 2 * time.Minute})
	overdue := event("c", store.Schedule{At: time.Now().Add(-time.Hour)})
	e.insert(published, dead, overdue)
	for q, id := range map[string]string{
		"UPDATE `outbox_messages` SET processed_at = " + mysql.Now + " WHERE id = ?": published.ID,
		"UPDATE `outbox_messages` SET dead_at = " + mysql.Now + " WHERE id = ?":      dead.ID,
		// the clock moved back an hour, due_at kept: overdue by about one
		"UPDATE `outbox_messages` SET due_at = " + mysql.Now + " - INTERVAL 1 HOUR WHERE id = ?": overdue.ID,
	} {
		if _, err := e.db.ExecContext(e.ctx, q, id); err != nil {
			t.Fatal(err)
		}
	}
	s, err := e.rel.Stats(e.ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	if s.Scheduled != 1 || s.NextScheduled != 0 || s.Overdue < 59*time.Minute || s.Overdue > 61*time.Minute {
		t.Fatalf("Stats = %+v, want 1 scheduled, overdue an hour, none next", s)
	}
	if d, ok, err := e.rel.NextDue(e.ctx, e.db); err != nil || ok {
		t.Fatalf("NextDue = %v, %v, %v; want none", d, ok, err)
	}
}

// 0007_schedule adds columns to the outbox. Self-creation over an outbox made
// before it adds nothing (it does not alter a table it did not make; the
// indexes on the new columns wait for them), the check names the migration,
// and Migrate makes the columns and indexes. Self-creation of a new outbox
// makes them all.
func TestScheduleMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	drv := mysql.Driver{}
	indexes := func(db *sql.DB) map[string]bool { return indexNames(t, db) }
	const keyIdx, schedIdx = "outbox_messages_schedule_key_idx", "outbox_messages_scheduled_idx"

	fresh := openDB(t)
	if err := drv.Outbox(outboxTable).Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if ix := indexes(fresh); !ix[keyIdx] || !ix[schedIdx] {
		t.Fatalf("indexes of a new outbox: %v", ix)
	}
	if err := drv.Outbox(outboxTable).Check(ctx, fresh); err != nil {
		t.Fatal(err)
	}

	old := openDB(t)
	migrateBefore(t, old, 7)
	if err := drv.Outbox(outboxTable).Create(ctx, old); err != nil {
		t.Fatalf("self-creation over an outbox made before 0007: %v", err)
	}
	if ix := indexes(old); ix[keyIdx] || ix[schedIdx] {
		t.Fatalf("self-creation over an outbox made before 0007 made %v", ix)
	}
	for what, err := range map[string]error{
		"outbox": drv.Outbox(outboxTable).Check(ctx, old),
		"relay":  drv.Relay(outboxTable).Check(ctx, old, store.RelayCheckParams{}),
	} {
		if !errors.Is(err, store.ErrSchemaOutdated) || !strings.Contains(err.Error(), "0007_schedule") {
			t.Fatalf("%s check of an outbox made before 0007: %v", what, err)
		}
	}
	if _, err := migrate.Migrate(ctx, old, drv); err != nil {
		t.Fatal(err)
	}
	if ix := indexes(old); !ix[keyIdx] || !ix[schedIdx] {
		t.Fatalf("indexes after Migrate: %v", ix)
	}
	if err := drv.Outbox(outboxTable).Check(ctx, old); err != nil {
		t.Fatalf("check after Migrate: %v", err)
	}
}
