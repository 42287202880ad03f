package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// Retention by partition drop: Setup makes the outbox partitioned by
// occurred_at before the hook is registered; events are written (once each,
// also when written again under the same id), published in both modes, and
// kept for the retention; then the partitions whose events were all
// published longer ago are dropped, while a dead event keeps its own.
func TestDropPartitions(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			t.Parallel()
			_, dsn := pgtest.Schema(t)
			db := pgtest.OpenDSN(t, dsn, nil)
			gc := newGoChannel()
			got := consume(t, gc, "account.deposited")
			const retention = 500 * time.Millisecond
			r, err := relay.New(db, gc, relay.Config{Ordered: ordered, Retention: retention, DropPartitions: true,
				PartitionInterval: time.Second, CleanupInterval: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond,
				MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond, MaxAttempts: 1,
				LeaseDuration: 3 * time.Second, PublishTimeout: time.Second, Logger: quietLogger()})
			testkit.Must(t, err)
			testkit.Must(t, r.Setup(context.Background()))
			testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{})))
			testkit.Must(t, db.AutoMigrate(&Account{}))
			e := &env{t: t, db: db, dsn: dsn}
			partitions := func() int64 {
				var n int64
				testkit.Must(t, db.Raw(`SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_messages'::regclass`).Scan(&n).Error)
				return n
			}
			if n := partitions(); n < 4 {
				t.Fatalf("%d partitions after Setup; want the default and the ranges around now", n)
			}

			// A dead event: its partition (and whatever else is in it) stays.
			poison := e.write(1, 1)
			var poisonID uuid.UUID
			for _, ids := range poison {
				poisonID = ids[0]
			}
			testkit.Must(t, testkit.SetOutboxColumn(db, poisonID, "metadata", `[]`))
			// A scheduled event, due long after the retention: its partition
			// stays too.
			later := &Account{ID: uuid.New()}
			later.Schedule(Deposited{AccountID: later.ID}, events.After(time.Hour))
			scheduledID := later.Records()[0].ID
			testkit.Must(t, db.Create(later).Error)
			time.Sleep(1100 * time.Millisecond) // the others in later ranges
			// An event written again (same id, same occurred_at) is refused as
			// a duplicate, as on a plain outbox.
			twice := events.Envelope{ID: events.NewID(), Type: "account.deposited", Version: 1,
				OccurredAt: time.Now().UTC(), Payload: []byte(`{"AccountID":"` + uuid.NewString() + `"}`)}
			testkit.Must(t, db.Transaction(func(tx *gorm.DB) error {
				return outboxhook.AddMessages(tx, "account.deposited", relay.NewMessage(twice))
			}))
			err = db.Transaction(func(tx *gorm.DB) error {
				return outboxhook.AddMessages(tx, "account.deposited", relay.NewMessage(twice))
			})
			if !errors.Is(err, outboxhook.ErrDuplicateID) {
				t.Fatalf("the same event added again: %v, want ErrDuplicateID", err)
			}

			e.run(r)
			ids := e.write(20, 2)
			eventually(t, 10*time.Second, "the events published", func() bool { return got.HasAll(idSet(ids)) })
			if ordered {
				checkOrder(t, ids, got)
			}
			if n := got.Count(twice.ID.String()); n != 1 {
				t.Fatalf("the event written twice was published %d times", n)
			}
			// Everything published, kept for the retention, then dropped with
			// its partition: only the dead event's row and the scheduled
			// event's stay.
			eventually(t, 15*time.Second, "the published events' partitions dropped", func() bool {
				rows := testkit.Outbox(t, db)
				return len(rows) == 2 && (rows[0].Dead || rows[1].Dead) &&
					(rows[0].ID == scheduledID || rows[1].ID == scheduledID)
			})
			var left int64
			testkit.Must(t, db.Raw(`SELECT count(*) FROM outbox_messages_default`).Scan(&left).Error)
			if left != 0 {
				t.Fatalf("%d events in the default partition", left)
			}
			s, err := r.Stats(context.Background())
			testkit.Must(t, err)
			if s.Dead != 1 || s.Pending != 1 || got.Count(scheduledID.String()) != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// Creating the next partition takes the outbox's ACCESS EXCLUSIVE lock: while
// a reader holds the table (pg_dump's ACCESS SHARE), the creation waits at
// most a moment and gives up, instead of queueing with every save queued
// behind it; the next maintenance round creates it once the reader is gone.
// Before, the saves waited for the reader's end.
func TestPartitionCreationBehindAReader(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.Schema(t)
	db := pgtest.OpenDSN(t, dsn, nil)
	const interval = time.Second
	r, err := relay.New(db, newGoChannel(), relay.Config{Retention: time.Hour, DropPartitions: true,
		PartitionInterval: interval, CleanupInterval: time.Hour, Logger: quietLogger()})
	testkit.Must(t, err)
	ctx := context.Background()
	testkit.Must(t, r.Setup(ctx))
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{})))
	testkit.Must(t, db.AutoMigrate(&Account{}))
	e := &env{t: t, db: db, dsn: dsn}
	partitions := func() int64 {
		var n int64
		testkit.Must(t, db.Raw(`SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox_messages'::regclass`).Scan(&n).Error)
		return n
	}
	time.Sleep(2 * interval) // the ranges ahead are now missing
	before := partitions()

	const hold = 4 * time.Second
	released := holdOutbox(t, dsn, hold)
	maintained := make(chan error, 1)
	go func() {
		_, err := r.Cleanup(ctx) // a maintenance round: creates the coming partitions
		maintained <- err
	}()
	time.Sleep(100 * time.Millisecond) // the creation is waiting for its lock
	var slowest time.Duration
	for start := time.Now(); time.Since(start) < hold/2; {
		t0 := time.Now()
		e.write(1, 1)
		slowest = max(slowest, time.Since(t0))
		time.Sleep(50 * time.Millisecond)
	}
	if slowest > time.Second {
		t.Fatalf("a save took %v while the partition's creation waited behind a reader; want it not held back", slowest)
	}
	testkit.Must(t, <-maintained)
	<-released
	_, err = r.Cleanup(ctx)
	testkit.Must(t, err)
	if after := partitions(); after <= before {
		t.Fatalf("%d partitions after the reader left (%d before); want the coming ones created", after, before)
	}
}

// holdOutbox has a reader, as pg_dump, hold ACCESS SHARE on the outbox of
// dsn for hold from when it returns; the channel closes once it let go.
func holdOutbox(t *testing.T, dsn string, hold time.Duration) <-chan struct{} {
	t.Helper()
	reader := pgtest.OpenDSN(t, dsn, nil)
	locked, released := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(released)
		err := reader.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec(`LOCK TABLE outbox_messages IN ACCESS SHARE MODE`).Error; err != nil {
				return err
			}
			close(locked)
			time.Sleep(hold)
			return nil
		})
		if err != nil {
			t.Errorf("reader: %v", err)
		}
	}()
	<-locked
	return released
}

// Two relays' maintenance rounds, several ranges missing, while a reader
// holds the outbox (pg_dump's ACCESS SHARE): each round ends at its first
// lock wait given up, and only one relay's DDL waits in the outbox's lock
// queue at a time, so a save waits behind at most one such wait. Before,
// each round waited for each missing range in turn, both relays at once,
// and a chaos run's save waited 2 s behind 19 of these waits.
func TestPartitionRoundsBehindAReaderWaitOnce(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.Schema(t)
	const interval = time.Second
	cfg := relay.Config{Retention: time.Hour, DropPartitions: true, PartitionInterval: interval,
		CleanupInterval: time.Hour, Logger: quietLogger()}
	var relays []*relay.Relay
	for range 2 {
		r, err := relay.New(pgtest.OpenDSN(t, dsn, nil), newGoChannel(), cfg)
		testkit.Must(t, err)
		testkit.Must(t, r.Setup(context.Background()))
		relays = append(relays, r)
	}
	time.Sleep(3 * interval) // three ranges ahead are now missing

	released := holdOutbox(t, dsn, 3*time.Second)

	// The watcher: the transactions waiting for a lock of the outbox, at
	// each look, until both rounds ended.
	watch := pgtest.OpenDSN(t, dsn, nil)
	waiters := map[string]bool{}
	most := 0
	ctx, stop := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ctx.Err() == nil {
			var now []string
			if err := watch.Raw(`SELECT virtualtransaction FROM pg_locks
WHERE locktype = 'relation' AND relation = 'outbox_messages'::regclass AND NOT granted`).Scan(&now).Error; err != nil {
				if ctx.Err() == nil {
					t.Errorf("watcher: %v", err)
				}
				return
			}
			most = max(most, len(now))
			for _, v := range now {
				waiters[v] = true
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	rounds := make(chan error, len(relays))
	for _, r := range relays {
		go func() {
			_, err := r.Cleanup(context.Background()) // a maintenance round: creates the missing ranges
			rounds <- err
		}()
	}
	for range relays {
		testkit.Must(t, <-rounds)
	}
	stop()
	<-watched
	if most > 1 {
		t.Errorf("%d relays' partition DDL waited in the outbox's lock queue at once, want one at a time", most)
	}
	if len(waiters) > len(relays) {
		t.Errorf("%d waits in the outbox's lock queue in %d rounds, want at most one a round", len(waiters), len(relays))
	}
	if len(waiters) == 0 {
		t.Errorf("no partition DDL waited behind the reader; the test saw nothing")
	}
	<-released
}

// The longest table name DropPartitions accepts gets a partition of its own
// for each range of a one-second interval, and events land in them, not in
// the default partition; a longer one is refused at New (PostgreSQL would
// truncate its partitions' names, and neighbouring ranges would collide).
func TestPartitionNamesFit(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.Schema(t)
	db := pgtest.OpenDSN(t, dsn, nil)
	cfg := relay.Config{Retention: time.Hour, DropPartitions: true, PartitionInterval: time.Second, Logger: quietLogger()}
	cfg.Table = strings.Repeat("t", 47)
	if _, err := relay.New(db, newGoChannel(), cfg); err == nil {
		t.Fatalf("a %d-byte table accepted for partitions", len(cfg.Table))
	}
	cfg.Table = strings.Repeat("t", 46)
	r, err := relay.New(db, newGoChannel(), cfg)
	testkit.Must(t, err)
	testkit.Must(t, r.Setup(context.Background()))
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Table: cfg.Table})))
	var names []string
	testkit.Must(t, db.Raw(`SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = ?::regclass ORDER BY 1`, cfg.Table).Scan(&names).Error)
	if len(names) < 4 { // the default and the ranges around now, one each
		t.Fatalf("partitions %v", names)
	}
	testkit.Must(t, outboxhook.Add(db, Deposited{AccountID: uuid.New(), Seq: 1}))
	var inDefault, all int64
	testkit.Must(t, db.Raw(`SELECT count(*) FROM `+cfg.Table+`_default`).Scan(&inDefault).Error)
	testkit.Must(t, db.Raw(`SELECT count(*) FROM `+cfg.Table).Scan(&all).Error)
	if all != 1 || inDefault != 0 {
		t.Fatalf("%d events, %d in the default partition (partitions %v)", all, inDefault, names)
	}
}
