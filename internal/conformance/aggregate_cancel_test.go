package conformance

// Cancels and moves recorded by an aggregate's methods (aggregate.Root.Cancel,
// CancelKey, Move, MoveKey): applied by the outbox hook in the transaction of
// the save that writes the aggregate, in the order recorded relative to its
// events, committed or rolled back with it, kept pending on the aggregate
// like events when it rolls back, and reported after the commit.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// TestAggregateCancel runs on every database (HERALD_TEST_DIALECTS).
func TestAggregateCancel(t *testing.T) {
	testkit.ForEach(t, func(t *testing.T, dl testkit.Dialect) {
		for _, tc := range []namedTest{
			{"CommittedNeverPublished", testAggCancelCommitted},
			{"RolledBackAppliedAtNextSave", testAggCancelRolledBack},
			{"SavepointRolledBack", testAggCancelSavepoint},
			{"Move", testAggMove},
			{"SameSaveAsSchedule", testAggCancelSameSave},
			{"Outcomes", testAggCancelOutcomes},
			{"GORMPaths", testAggCancelPaths},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.f(t, dl)
			})
		}
	})
}

// reminderKey is the key of an account's reminder.
func reminderKey(a *Account) string { return "reminder:" + a.ID.String() }

// placed returns a saved account with an event due now, a reminder under
// reminderKey and an event scheduled by id, both after d; and their ids.
func placed(t *testing.T, db *gorm.DB, d time.Duration) (a *Account, reminder, byID uuid.UUID) {
	t.Helper()
	a = &Account{ID: uuid.New()}
	a.Record(Deposited{AccountID: a.ID, Seq: 0})
	a.Schedule(Deposited{AccountID: a.ID, Seq: 1}, events.After(d).Keyed(reminderKey(a)))
	a.Schedule(Deposited{AccountID: a.ID, Seq: 2}, events.After(d))
	recs := a.Records()
	must(t, db.Create(a).Error)
	return a, recs[1].ID, recs[2].ID
}

// present reports which of ids have an outbox row.
func present(t *testing.T, db *gorm.DB, ids ...uuid.UUID) []bool {
	t.Helper()
	have := map[uuid.UUID]bool{}
	for _, r := range testkit.Outbox(t, db) {
		have[r.ID] = true
	}
	out := make([]bool, len(ids))
	for i, id := range ids {
		out[i] = have[id]
	}
	return out
}

// wantOutcomes checks what the last committed cancels and moves of a did.
func wantOutcomes(t *testing.T, a *Account, want ...aggregate.Rescheduled) {
	t.Helper()
	got := a.Rescheduled()
	if len(got) != len(want) {
		t.Fatalf("Rescheduled() = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Rescheduled()[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func cancelKey(key string, changed int64) aggregate.Rescheduled {
	return aggregate.Rescheduled{Reschedule: aggregate.Reschedule{Key: key, Cancel: true}, Changed: changed}
}

func cancelID(id uuid.UUID, changed int64) aggregate.Rescheduled {
	return aggregate.Rescheduled{Reschedule: aggregate.Reschedule{ID: id, Cancel: true}, Changed: changed}
}

// A cancel by key and one by id, recorded by the aggregate's method and
// committed with its change, are never published; an event scheduled with
// them and not cancelled is, on time.
func testAggCancelCommitted(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	pub := testkit.NewGoChannel()
	got := testkit.Consume(t, pub, depositedTopic)
	r := e.relay(e.open(), pub, relay.Config{PollInterval: 200 * time.Millisecond})
	e.run(r)
	db := e.open()
	must(t, db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake})))
	a, reminder, byID := placed(t, db, 1500*time.Millisecond)
	a.Schedule(Deposited{AccountID: a.ID, Seq: 3}, events.After(2*time.Second))
	kept := a.Records()[0].ID
	must(t, db.Save(a).Error)

	a.Balance = 10 // paid: the reminders are pointless
	a.CancelKey(reminderKey(a))
	a.Cancel(byID)
	if n := len(a.Reschedules()); n != 2 || len(a.Events()) != 0 {
		t.Fatalf("pending: %d changes, %d events", n, len(a.Events()))
	}
	must(t, db.Save(a).Error)
	wantOutcomes(t, a, cancelKey(reminderKey(a), 1), cancelID(byID, 1))
	if len(a.Reschedules()) != 0 {
		t.Fatalf("changes still pending after the commit: %+v", a.Reschedules())
	}
	eventually(t, 20*time.Second, "the event not cancelled", func() bool { return got.Count(kept.String()) == 1 })
	time.Sleep(300 * time.Millisecond)
	if got.Count(reminder.String()) != 0 || got.Count(byID.String()) != 0 {
		t.Fatal("a cancelled event was published")
	}
	if got.Distinct() != 2 { // Seq 0, and Seq 3
		t.Fatalf("published %d events, want 2", got.Distinct())
	}
	// The next save forgets the outcomes.
	must(t, db.Save(a).Error)
	wantOutcomes(t, a)
}

// A save that rolls back cancels nothing: the event stays scheduled, the
// cancel stays pending on the aggregate, and the next save applies it.
func testAggCancelRolledBack(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&Account{}))
	a, reminder, byID := placed(t, db, time.Hour)
	boom := errors.New("rolled back")
	err := db.Transaction(func(tx *gorm.DB) error {
		a.Balance = 10
		a.CancelKey(reminderKey(a))
		a.Cancel(byID)
		if err := tx.Save(a).Error; err != nil {
			return err
		}
		return boom
	})
	wantErrIs(t, err, boom)
	if p := present(t, db, reminder, byID); !p[0] || !p[1] {
		t.Fatalf("a rolled-back cancel cancelled: present = %v", p)
	}
	if n := len(a.Reschedules()); n != 2 {
		t.Fatalf("%d changes pending after the rollback, want 2", n)
	}
	wantOutcomes(t, a)
	must(t, db.Save(a).Error)
	if p := present(t, db, reminder, byID); p[0] || p[1] {
		t.Fatalf("the cancels were not applied again: present = %v", p)
	}
	wantOutcomes(t, a, cancelKey(reminderKey(a), 1), cancelID(byID, 1))
}

// A cancel saved in a nested transaction (a savepoint) that rolls back,
// while the outer transaction commits, stays pending; one saved in a nested
// transaction that commits is kept.
func testAggCancelSavepoint(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&Account{}))
	a, reminder, byID := placed(t, db, time.Hour)
	b, reminderB, _ := placed(t, db, time.Hour)
	boom := errors.New("rolled back")
	must(t, db.Transaction(func(tx *gorm.DB) error {
		err := tx.Transaction(func(tx *gorm.DB) error {
			a.CancelKey(reminderKey(a))
			if err := tx.Save(a).Error; err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			return fmt.Errorf("nested transaction = %w", err)
		}
		return tx.Transaction(func(tx *gorm.DB) error {
			b.CancelKey(reminderKey(b))
			return tx.Save(b).Error
		})
	}))
	if p := present(t, db, reminder, byID, reminderB); !p[0] || !p[1] || p[2] {
		t.Fatalf("present = %v, want a's reminder, a's event and not b's reminder", p)
	}
	if len(a.Reschedules()) != 1 || len(b.Reschedules()) != 0 {
		t.Fatalf("pending changes: a %d, b %d; want 1, 0", len(a.Reschedules()), len(b.Reschedules()))
	}
	wantOutcomes(t, b, cancelKey(reminderKey(b), 1))
	must(t, db.Save(a).Error)
	if present(t, db, reminder)[0] {
		t.Fatal("a's cancel was not applied at its next save")
	}
}

// A move by key and one by id change the due time the event's metadata
// carries, with the save.
func testAggMove(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&Account{}))
	a, reminder, byID := placed(t, db, time.Hour)
	before := time.Now()
	a.MoveKey(reminderKey(a), events.Schedule{}) // now
	a.Move(byID, events.After(2*time.Hour))
	must(t, db.Save(a).Error)
	wantOutcomes(t, a,
		aggregate.Rescheduled{Reschedule: aggregate.Reschedule{Key: reminderKey(a)}, Changed: 1},
		aggregate.Rescheduled{Reschedule: aggregate.Reschedule{ID: byID, To: events.After(2 * time.Hour)}, Changed: 1})
	due := map[uuid.UUID]time.Time{}
	for _, r := range testkit.Outbox(t, db) {
		if at, ok := events.DueAt(r.Metadata); ok {
			due[r.ID] = at
		}
	}
	if d := due[reminder].Sub(before); d < -time.Minute || d > time.Minute {
		t.Fatalf("reminder due %v after the move, want now", d)
	}
	if d := due[byID].Sub(before); d < 110*time.Minute || d > 130*time.Minute {
		t.Fatalf("event due %v after the move, want 2h", d)
	}
}

// A cancel recorded after a Schedule of its key in one save cancels it; one
// recorded before the Schedule leaves it scheduled.
func testAggCancelSameSave(t *testing.T, dl testkit.Dialect) {
	db := setup(t, dl, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&Account{}))
	a := &Account{ID: uuid.New()}
	a.Record(Deposited{AccountID: a.ID, Seq: 0})
	a.Schedule(Deposited{AccountID: a.ID, Seq: 1}, events.After(time.Hour).Keyed(reminderKey(a)))
	a.CancelKey(reminderKey(a))
	recs := a.Records()
	must(t, db.Create(a).Error)
	if p := present(t, db, recs[0].ID, recs[1].ID); !p[0] || p[1] {
		t.Fatalf("present = %v, want the event and not the cancelled reminder", p)
	}
	wantOutcomes(t, a, cancelKey(reminderKey(a), 1))

	b := &Account{ID: uuid.New()}
	b.CancelKey(reminderKey(b))
	b.Schedule(Deposited{AccountID: b.ID, Seq: 1}, events.After(time.Hour).Keyed(reminderKey(b)))
	id := b.Records()[0].ID
	must(t, db.Create(b).Error)
	if !present(t, db, id)[0] {
		t.Fatal("a Schedule recorded after the cancel of its key was cancelled")
	}
	if o := b.Rescheduled(); len(o) != 1 || !o[0].Unknown() {
		t.Fatalf("Rescheduled() = %+v, want one unknown", o)
	}
}

// What a cancel that cannot cancel finds is reported, not failed: published,
// due, unknown. Under outboxhook.RequireRescheduled it fails the save, which
// rolls back with its change, and stays pending.
func testAggCancelOutcomes(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	db := e.open()
	must(t, db.Use(outboxhook.New(outboxhook.Config{})))
	a := &Account{ID: uuid.New()}
	a.Schedule(Deposited{AccountID: a.ID, Seq: 0}, events.At(time.Now().Add(-time.Minute)).Keyed("published:"+a.ID.String()))
	published := a.Records()[0].ID
	must(t, db.Create(a).Error)
	pub := testkit.NewGoChannel()
	got := testkit.Consume(t, pub, depositedTopic)
	_, stop := e.run(e.relay(e.open(), pub, relay.Config{PollInterval: 100 * time.Millisecond, Retention: time.Hour}))
	eventually(t, 20*time.Second, "the published event", func() bool { return got.Count(published.String()) == 1 })
	eventually(t, 5*time.Second, "the publish marked", func() bool {
		return errors.Is(outboxhook.Cancel(db, published), outboxhook.ErrPublished)
	})
	stop()
	// Due: scheduled in the past, and no relay runs now.
	a.Schedule(Deposited{AccountID: a.ID, Seq: 1}, events.At(time.Now().Add(-time.Minute)).Keyed("due:"+a.ID.String()))
	must(t, db.Save(a).Error)

	unknown := uuid.New()
	a.Cancel(published)
	a.CancelKey("due:" + a.ID.String())
	a.Cancel(unknown)
	a.Balance = 5
	must(t, db.Save(a).Error) // the default: not an error of the save
	got2 := a.Rescheduled()
	if len(got2) != 3 || got2[0].Published != 1 || got2[1].Due != 1 || !got2[2].Unknown() ||
		got2[0].Changed+got2[1].Changed != 0 {
		t.Fatalf("Rescheduled() = %+v, want published, due, unknown", got2)
	}

	// Asked for: the save fails, its change rolls back, the cancel stays pending.
	a.Balance = 7
	a.Cancel(published)
	err := db.WithContext(outboxhook.RequireRescheduled(context.Background())).Save(a).Error
	wantErrIs(t, err, outboxhook.ErrPublished)
	var saved Account
	must(t, db.First(&saved, "id = ?", a.ID).Error)
	if saved.Balance != 5 || len(a.Reschedules()) != 1 {
		t.Fatalf("balance %d, %d pending changes; want 5 and 1", saved.Balance, len(a.Reschedules()))
	}
	err = db.WithContext(outboxhook.RequireRescheduled(context.Background())).Save(a).Error
	wantErrIs(t, err, outboxhook.ErrPublished)
	must(t, db.Save(a).Error) // without: saved, and the outcome reported
	if o := a.Rescheduled(); len(o) != 1 || o[0].Published != 1 {
		t.Fatalf("Rescheduled() = %+v", o)
	}
}

// Every GORM path that writes an aggregate's events applies its cancels:
// Create, Save, Updates, Delete, in a transaction of the caller's, on
// db.Connection (in a transaction the plugin watches or not), with
// PrepareStmt and SkipDefaultTransaction.
func testAggCancelPaths(t *testing.T, dl testkit.Dialect) {
	saves := []struct {
		name string
		save func(db *gorm.DB, a *Account) error
	}{
		{"Save", func(db *gorm.DB, a *Account) error { return db.Save(a).Error }},
		{"Updates", func(db *gorm.DB, a *Account) error { return db.Model(a).Updates(map[string]any{"balance": 3}).Error }},
		{"Update", func(db *gorm.DB, a *Account) error { return db.Model(a).Update("balance", 4).Error }},
		{"Delete", func(db *gorm.DB, a *Account) error { return db.Delete(a).Error }},
		{"Transaction", func(db *gorm.DB, a *Account) error {
			return db.Transaction(func(tx *gorm.DB) error { return tx.Save(a).Error })
		}},
		{"Begin", func(db *gorm.DB, a *Account) error {
			tx := db.Begin()
			if err := tx.Save(a).Error; err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit().Error
		}},
		{"Connection", func(db *gorm.DB, a *Account) error {
			return db.Connection(func(tx *gorm.DB) error { return tx.Save(a).Error })
		}},
		{"Connection Transaction first", func(db *gorm.DB, a *Account) error { // unwatched: see docs/limits.md
			return db.Connection(func(tx *gorm.DB) error {
				return tx.Transaction(func(tx *gorm.DB) error { return tx.Save(a).Error })
			})
		}},
		{"Connection Transaction after a statement", func(db *gorm.DB, a *Account) error {
			return db.Connection(func(tx *gorm.DB) error {
				if err := tx.Exec("SELECT 1").Error; err != nil {
					return err
				}
				return tx.Transaction(func(tx *gorm.DB) error { return tx.Save(a).Error })
			})
		}},
	}
	for _, gcfg := range []gorm.Config{{}, {PrepareStmt: true}, {SkipDefaultTransaction: true}} {
		db := setup(t, dl, outboxhook.Config{}, &gcfg)
		must(t, db.AutoMigrate(&Account{}))
		for _, s := range saves {
			t.Run(fmt.Sprintf("%s/PrepareStmt=%v/SkipDefaultTransaction=%v", s.name, gcfg.PrepareStmt, gcfg.SkipDefaultTransaction), func(t *testing.T) {
				a, reminder, byID := placed(t, db, time.Hour)
				a.CancelKey(reminderKey(a))
				a.Cancel(byID)
				must(t, s.save(db, a))
				if p := present(t, db, reminder, byID); p[0] || p[1] {
					t.Fatalf("present = %v after the cancels", p)
				}
				wantOutcomes(t, a, cancelKey(reminderKey(a), 1), cancelID(byID, 1))
			})
		}
	}
}
