package conformance

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

var scheduleTests = []namedTest{
	{"OnTimeNeverEarly", testScheduleOnTime},
	{"CancelAndMoveInTheCallersTransaction", testScheduleCancelMove},
	{"OrderInLineAndApart", testScheduleOrder},
	{"RetentionKeepsScheduled", testScheduleRetention},
	{"UncommittedChangeHoldsOnlyItsAggregate", testScheduleUncommittedHoldsAggregate},
	{"HeldInLineIsNotLate", testScheduleHeldNotLate},
}

// slowPoll is a poll interval no test waits for: what is published on time
// was found by the relay's timer (the next due time), not by a poll.
const slowPoll = time.Minute

// checkNotEarly fails for a message of got published before the due time its
// metadata carries (the database runs on this machine: one clock).
func checkNotEarly(t *testing.T, got *testkit.Received, id string) time.Duration {
	t.Helper()
	for _, m := range got.Snapshot() {
		if m.UUID != id {
			continue
		}
		due, ok := events.DueAt(m.Metadata)
		if !ok {
			t.Fatalf("scheduled message %s carries no %s: %v", id, events.MetaDueAt, m.Metadata)
		}
		late := got.FirstAt(id).Sub(due)
		if late < -5*time.Millisecond {
			t.Fatalf("message %s published %v before its due time", id, -late)
		}
		return late
	}
	t.Fatalf("message %s not published", id)
	return 0
}

// A scheduled event is published when it is due, by the relay's timer
// (the poll is a minute), never before; the aggregate's events due at once
// go at once. Its message carries its due time.
func testScheduleOnTime(t *testing.T, dl testkit.Dialect) {
	forModes(t, func(t *testing.T, ordered bool) {
		e := newRelayEnv(t, dl)
		pub := testkit.NewGoChannel()
		got := testkit.Consume(t, pub, depositedTopic)
		r := e.relay(e.open(), pub, relay.Config{Ordered: ordered, PollInterval: slowPoll, LeaseDuration: 3 * time.Second, PublishTimeout: time.Second})
		e.run(r)
		// The writers wake the relay at their commits, as in its process.
		db := e.open()
		must(t, db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake})))
		time.Sleep(200 * time.Millisecond) // the relay waits for its poll
		a := &Account{ID: uuid.New()}
		a.Record(Deposited{AccountID: a.ID, Seq: 0})
		a.Schedule(Deposited{AccountID: a.ID, Seq: 1}, events.After(700*time.Millisecond).Detached())
		now, later := a.Records()[0].ID.String(), a.Records()[1].ID.String()
		must(t, db.Create(a).Error)
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outboxhook.Schedule(tx, events.After(1200*time.Millisecond), Deposited{AccountID: a.ID, Seq: 2})
		}))
		eventually(t, 10*time.Second, "the event due at once", func() bool { return got.Count(now) == 1 })
		eventually(t, 20*time.Second, "the scheduled events", func() bool { return got.Distinct() == 3 })
		late := checkNotEarly(t, got, later)
		t.Logf("published %v after its due time", late)
		for _, m := range got.Snapshot() {
			if depositSeq(m.Payload) == 2 {
				checkNotEarly(t, got, m.UUID)
			}
		}
	})
}

// Cancel and Move commit or roll back with the business change that decided
// them; a cancelled event is never published, a moved one when its new time
// comes; a cancel after the publish says so.
func testScheduleCancelMove(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	pub := testkit.NewGoChannel()
	got := testkit.Consume(t, pub, depositedTopic)
	a := &Account{ID: uuid.New()}
	a.Schedule(Deposited{AccountID: a.ID, Seq: 0}, events.After(time.Hour).Keyed("reminder:"+a.ID.String()))
	a.Schedule(Deposited{AccountID: a.ID, Seq: 1}, events.After(time.Hour).Keyed("expiry:"+a.ID.String()))
	a.Schedule(Deposited{AccountID: a.ID, Seq: 2}, events.After(time.Hour))
	a.Schedule(Deposited{AccountID: a.ID, Seq: 3}, events.After(time.Hour))
	recs := a.Records()
	r := e.relay(e.open(), pub, relay.Config{PollInterval: slowPoll, Retention: time.Hour})
	e.run(r)
	// The writers wake the relay at their commits, as in its process: a
	// move to now is published at once, not at the next poll.
	db := e.open()
	must(t, db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake})))
	must(t, db.Create(a).Error)

	// The customer paid: the reminder is cancelled with the payment.
	must(t, db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&Account{ID: a.ID}).Update("balance", 10).Error; err != nil {
			return err
		}
		res, err := outboxhook.CancelKey(tx, "reminder:"+a.ID.String())
		if err == nil && res.Changed != 1 {
			err = fmt.Errorf("cancel by key = %+v", res)
		}
		return err
	}))
	// A cancel that rolls back cancelled nothing.
	boom := errors.New("rolled back")
	err := db.Transaction(func(tx *gorm.DB) error {
		must(t, outboxhook.Cancel(tx, recs[2].ID))
		return boom
	})
	wantErrIs(t, err, boom)
	// Moves: the expiry to now by key, event 2 to now by id, event 3 later.
	must(t, db.Transaction(func(tx *gorm.DB) error {
		if res, err := outboxhook.MoveKey(tx, "expiry:"+a.ID.String(), events.Schedule{}); err != nil || res.Changed != 1 {
			return fmt.Errorf("move by key = %+v: %w", res, err)
		}
		if err := outboxhook.Move(tx, recs[2].ID, events.After(300*time.Millisecond)); err != nil {
			return err
		}
		return outboxhook.Move(tx, recs[3].ID, events.After(2*time.Hour))
	}))
	eventually(t, 20*time.Second, "the moved events", func() bool {
		return got.Count(recs[1].ID.String()) == 1 && got.Count(recs[2].ID.String()) == 1
	})
	checkNotEarly(t, got, recs[2].ID.String())
	if got.Count(recs[0].ID.String()) != 0 || got.Count(recs[3].ID.String()) != 0 {
		t.Fatal("a cancelled or later event was published")
	}
	// After the publish: the cancel says what happened.
	eventually(t, 5*time.Second, "the publish marked", func() bool {
		return errors.Is(outboxhook.Cancel(db, recs[2].ID), outboxhook.ErrPublished)
	})
	wantErrIs(t, outboxhook.Cancel(db, recs[0].ID), outboxhook.ErrNotScheduled)
	must(t, outboxhook.Cancel(db, recs[3].ID))
	wantErrIs(t, outboxhook.Cancel(db, recs[3].ID), outboxhook.ErrNotScheduled)
}

// In ordered mode an event scheduled in line holds its aggregate's later
// events back until it is published; one scheduled apart neither waits nor
// holds anything back. Unscheduled events keep their order either way, with
// two relays and leases changing hands (one stops midway).
func testScheduleOrder(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	pub := testkit.NewGoChannel()
	got := testkit.Consume(t, pub, depositedTopic)
	cfg := relay.Config{Ordered: true, Partitions: 8, LeaseDuration: 3 * time.Second, PublishTimeout: time.Second, PollInterval: 200 * time.Millisecond, BatchSize: 7}
	_, stopFirst := e.run(e.relay(e.open(), pub, withInstance(cfg, "first")))
	e.run(e.relay(e.open(), pub, withInstance(cfg, "second")))
	const n = 12
	inLine := map[uuid.UUID][]uuid.UUID{} // every event, in order
	apart := map[uuid.UUID][]uuid.UUID{}  // the unscheduled events, in order
	scheduled := map[string]bool{}
	var accounts []uuid.UUID
	for i := range n {
		a := &Account{ID: uuid.New()}
		a.Record(Deposited{AccountID: a.ID, Seq: 0})
		s := events.After(time.Duration(500+50*i) * time.Millisecond)
		if i%2 == 1 {
			s = events.After(time.Duration(1500+50*i) * time.Millisecond).Detached()
		}
		a.Schedule(Deposited{AccountID: a.ID, Seq: 1}, s)
		recs := a.Records()
		must(t, e.db.Create(a).Error)
		scheduled[recs[1].ID.String()] = i%2 == 1
		if i%2 == 0 {
			inLine[a.ID] = []uuid.UUID{recs[0].ID, recs[1].ID}
		} else {
			apart[a.ID] = []uuid.UUID{recs[0].ID}
		}
		accounts = append(accounts, a.ID)
	}
	for k := 2; k < 6; k++ {
		if k == 4 {
			stopFirst() // its partitions go to the second when its leases end
		}
		more := e.deposit(accounts, k, 1)
		for id, evs := range more {
			if _, ok := inLine[id]; ok {
				inLine[id] = append(inLine[id], evs...)
			} else {
				apart[id] = append(apart[id], evs...)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	eventually(t, 30*time.Second, "every event", func() bool { return got.Distinct() == n*6 })
	testkit.CheckOrder(t, inLine, got)
	testkit.CheckOrder(t, apart, got)
	// The apart events let their aggregates' later events (written long
	// before they were due) go first, and carry their aggregate.
	ahead := 0
	for _, m := range got.Snapshot() {
		isApart, ok := scheduled[m.UUID]
		if !ok {
			continue
		}
		checkNotEarly(t, got, m.UUID)
		if !isApart {
			continue
		}
		agg := m.Metadata.Get(events.MetaAggregateID)
		later := apart[uuid.MustParse(agg)]
		if len(later) < 2 {
			t.Fatalf("apart event %s names aggregate %q: %v", m.UUID, agg, m.Metadata)
		}
		if got.FirstAt(later[1].String()).Before(got.FirstAt(m.UUID)) {
			ahead++
		}
	}
	if ahead == 0 {
		t.Fatal("no apart event let its aggregate's later events go first")
	}
}

func withInstance(cfg relay.Config, id string) relay.Config {
	cfg.InstanceID = id
	return cfg
}

// Retention's cleanup deletes published events only: a scheduled event not
// due yet stays, however old its occurred_at.
func testScheduleRetention(t *testing.T, dl testkit.Dialect) {
	e := newRelayEnv(t, dl)
	pub := testkit.NewGoChannel()
	got := testkit.Consume(t, pub, depositedTopic)
	a := &Account{ID: uuid.New()}
	a.Schedule(Deposited{AccountID: a.ID, Seq: 0}, events.After(time.Hour))
	a.Record(Deposited{AccountID: a.ID, Seq: 1})
	recs := a.Records()
	must(t, e.db.Create(a).Error)
	sched := recs[0].ID.String()
	for _, r := range recs {
		e.d.StampEvent(t, e.db, r.ID, "occurred_at", 48*time.Hour)
	}
	e.run(e.relay(nil, pub, relay.Config{Retention: time.Millisecond, CleanupInterval: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond}))
	eventually(t, 10*time.Second, "the due event published", func() bool { return got.Distinct() == 1 })
	eventually(t, 10*time.Second, "the published event cleaned up", func() bool { return count(t, e.db, "outbox_messages") == 1 })
	time.Sleep(300 * time.Millisecond) // more cleanups
	if count(t, e.db, "outbox_messages") != 1 || got.Count(sched) != 0 {
		t.Fatal("the scheduled event was cleaned up or published")
	}
	must(t, outboxhook.Cancel(e.db, uuid.MustParse(sched)))
}

// A cancel or move of an aggregate's scheduled event, in a transaction that
// is still open when the event comes due by the committed rows, holds back
// that aggregate's line only: an ordered relay publishes another aggregate's
// events meanwhile. Once the transaction commits, the line resumes: a
// cancelled event is never published, a moved one at its new time, and the
// aggregate's later event after it. (SQLite has one writer: another
// aggregate's event cannot be saved while the transaction is open.)
func testScheduleUncommittedHoldsAggregate(t *testing.T, dl testkit.Dialect) {
	if dl.SQL.OneWriter() {
		t.Skip("one writer: another transaction cannot save while the cancel's is open")
	}
	for _, move := range []bool{false, true} {
		t.Run(map[bool]string{false: "cancel", true: "move"}[move], func(t *testing.T) {
			e := newRelayEnv(t, dl)
			pub := testkit.NewGoChannel()
			got := testkit.Consume(t, pub, depositedTopic)
			e.run(e.relay(e.open(), pub, relay.Config{Ordered: true, PollInterval: 100 * time.Millisecond,
				LeaseDuration: 3 * time.Second, PublishTimeout: time.Second}))
			// The relay is running (its start makes the indexes it misses:
			// DDL that would queue behind the open transaction below).
			warm, err := e.writeOne(deposited)
			must(t, err)
			eventually(t, 10*time.Second, "the relay running", func() bool { return got.Count(warm) == 1 })
			a := &Account{ID: uuid.New()}
			key := "hold:" + a.ID.String()
			a.Schedule(Deposited{AccountID: a.ID, Seq: 0}, events.After(1500*time.Millisecond).Keyed(key))
			a.Record(Deposited{AccountID: a.ID, Seq: 1}) // in line behind it
			recs := a.Records()
			sched, later := recs[0].ID.String(), recs[1].ID.String()
			must(t, e.db.Create(a).Error)
			start := time.Now()

			// Before it is due: cancelled (by id) or moved (by key) 6 s
			// ahead, uncommitted, at the database's default isolation.
			w := e.open()
			must(t, w.Use(outboxhook.New(outboxhook.Config{})))
			tx := w.Begin()
			must(t, tx.Error)
			defer tx.Rollback()
			if move {
				res, err := outboxhook.MoveKey(tx, key, events.After(6*time.Second))
				must(t, err)
				if res.Changed != 1 {
					t.Fatalf("moved %d events, want 1", res.Changed)
				}
			} else {
				must(t, outboxhook.Cancel(tx, recs[0].ID))
			}
			// The committed rows say it is due now: the relay's claims read it.
			time.Sleep(time.Until(start.Add(2 * time.Second)))
			b, err := e.writeOne(deposited)
			must(t, err)
			written := time.Now()
			eventually(t, 3*time.Second, "another aggregate's event, while the transaction is open", func() bool { return got.Count(b) == 1 })
			t.Logf("the other aggregate's event published %v after its save", got.FirstAt(b).Sub(written))
			if got.Count(sched) != 0 || got.Count(later) != 0 {
				t.Fatal("the held aggregate's events were published while its transaction was open")
			}
			must(t, tx.Commit().Error)
			eventually(t, 15*time.Second, "the held aggregate's later event", func() bool { return got.Count(later) == 1 })
			if move {
				if got.Count(sched) != 1 {
					t.Fatal("the moved event was not published before its aggregate's later event")
				}
				checkNotEarly(t, got, sched)
				testkit.CheckOrder(t, map[uuid.UUID][]uuid.UUID{a.ID: {recs[0].ID, recs[1].ID}}, got)
			} else {
				time.Sleep(300 * time.Millisecond)
				if got.Count(sched) != 0 {
					t.Fatal("the cancelled event was published")
				}
			}
		})
	}
}

// An event an ordered relay holds in line behind its aggregate's scheduled
// event, not due yet, waits by design: it is not late. The oldest pending
// age (relay.Stats, the gauge) leaves it out in ordered mode; it is counted
// in Pending; the admin's health (MaxAge) leaves it out in ordered mode:
// while an ordered relay is alive, and after it stopped and gave its leases
// back (a fleet's ordered tenant between runs). An unordered relay holds
// nothing in line: there it is late.
func testScheduleHeldNotLate(t *testing.T, dl testkit.Dialect) {
	forModes(t, func(t *testing.T, ordered bool) {
		e := newRelayEnv(t, dl)
		pub := testkit.NewGoChannel()
		got := testkit.Consume(t, pub, depositedTopic)
		r := e.relay(e.open(), pub, relay.Config{Ordered: ordered, PollInterval: 100 * time.Millisecond,
			LeaseDuration: 3 * time.Second, PublishTimeout: time.Second})
		stop := func() {}
		if ordered { // an unordered relay would publish the held event
			_, stop = e.run(r)
			warm, err := e.writeOne(deposited)
			must(t, err)
			eventually(t, 10*time.Second, "the relay running", func() bool { return got.Count(warm) == 1 })
		}
		a := &Account{ID: uuid.New()}
		a.Schedule(Deposited{AccountID: a.ID, Seq: 0}, events.After(time.Hour)) // a reminder, in line
		a.Record(Deposited{AccountID: a.ID, Seq: 1})
		recs := a.Records()
		must(t, e.db.Create(a).Error)
		e.d.StampEvent(t, e.db, recs[1].ID, "created_at", 2*time.Hour) // saved long ago
		time.Sleep(300 * time.Millisecond)                             // claims pass it by
		s, err := r.Stats(t.Context())
		must(t, err)
		t.Logf("%s: pending %d, oldest pending %v", modeName(ordered), s.Pending, s.OldestPending)
		op, err := admin.Open(t.Context(), e.db, admin.Config{MaxAge: time.Hour})
		must(t, err)
		st, err := op.Status(t.Context())
		must(t, err)
		if st.Healthy != ordered || st.Relays.Ordered != ordered {
			t.Fatalf("%s: admin status healthy = %v, problems %q, relays ordered %v", modeName(ordered), st.Healthy, st.Problems, st.Relays.Ordered)
		}
		stop() // an ordered relay gives its leases back: none alive
		if st, err = op.Status(t.Context()); err != nil || st.Healthy != ordered || st.Relays.Ordered != ordered || st.Relays.Alive != 0 {
			t.Fatalf("%s, no relay alive: admin status healthy = %v, problems %q, relays %+v, err %v", modeName(ordered), st.Healthy, st.Problems, st.Relays, err)
		}
		if s.Pending != 2 {
			t.Fatalf("Pending = %d, want 2", s.Pending)
		}
		if !ordered {
			if s.OldestPending < time.Hour {
				t.Fatalf("unordered: OldestPending = %v, want about 2h (nothing is held in line)", s.OldestPending)
			}
			return
		}
		if s.OldestPending > time.Minute {
			t.Fatalf("ordered: OldestPending = %v, want about 0: the event held in line behind a reminder not due is not late", s.OldestPending)
		}
		if got.Count(recs[1].ID.String()) != 0 {
			t.Fatal("the event held in line was published")
		}
	})
}
