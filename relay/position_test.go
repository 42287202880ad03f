package relay_test

// Claims that start from a remembered position (PostgreSQL): they skip the
// dead rows a long transaction keeps, and lose nothing that commits late.

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/relay"
)

// holdXact holds a transaction id open on a connection of its own until the
// test ends: vacuum can then remove no row deleted meanwhile, and no index
// entry of one can be marked dead.
func holdXact(t *testing.T, dsn string) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tx.Rollback()
		_ = db.Close()
	})
}

// indexReads returns how many index entries scans of the outbox's index idx
// have read (pg_stat_all_indexes.idx_tup_read), as flushed so far.
func indexReads(t *testing.T, db *gorm.DB, idx string) int64 {
	t.Helper()
	var n int64
	if err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`SELECT pg_stat_clear_snapshot()`).Error; err != nil {
			return err
		}
		return tx.Raw(`SELECT idx_tup_read FROM pg_stat_all_indexes WHERE indexrelid = ?::regclass`, idx).Scan(&n).Error
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// While a transaction holds vacuum back, the relay's claims do not walk the
// index entries of the events it published: with 3,000 such entries at the
// head of the index, a relay that claims about 50 times (one event at a time)
// reads a few head scans' worth of entries (its first claims, before it has a
// position: two, more on a loaded machine, where an ordered relay waits
// longer for its leases), not 50.
func TestClaimsSkipDeadRows(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			e := newEnv(t)
			holdXact(t, e.dsn)
			idx := map[bool]string{false: "outbox_messages_pending_idx", true: "outbox_messages_stream_ordered_idx"}[ordered]
			cfg := relay.Config{Ordered: ordered, PollInterval: 20 * time.Millisecond, SweepInterval: time.Hour,
				LeaseDuration: 3 * time.Second, PublishTimeout: time.Second, Logger: quietLogger()}
			// Waits watch the subscriber: counting pending rows would read the
			// index too.
			run := func(want int, sub func()) {
				rdb := pgtest.OpenDSN(t, e.dsn, nil)
				gc := newGoChannel()
				got := consume(t, gc, "account.deposited")
				r, err := relay.New(rdb, gc, cfg)
				if err != nil {
					t.Fatal(err)
				}
				_, stop := e.run(r)
				sub()
				eventually(t, 30*time.Second, fmt.Sprintf("%d events published", want), func() bool { return got.distinct() == want })
				stop()
				if s, err := rdb.DB(); err == nil {
					_ = s.Close() // its sessions end: their statistics are flushed
				}
			}
			e.write(3000, 1)
			run(3000, func() {})
			// The first relay's sessions have ended: their counts are in.
			before := indexReads(t, e.db, idx)
			for {
				time.Sleep(300 * time.Millisecond)
				n := indexReads(t, e.db, idx)
				if n == before {
					break
				}
				before = n
			}
			run(50, func() {
				time.Sleep(200 * time.Millisecond) // its first claims, from the head
				for range 50 {
					e.write(1, 1)
					time.Sleep(20 * time.Millisecond)
				}
			})
			var read int64
			eventually(t, 15*time.Second, "the relay's statistics", func() bool {
				read = indexReads(t, e.db, idx) - before
				return read > 0
			})
			t.Logf("%d index entries read by about 50 claims over 3,000 dead ones", read)
			if read > 30000 { // 50 head scans: 150,000
				t.Fatalf("the claims read %d index entries: they walk the dead rows", read)
			}
		})
	}
}

// An event whose transaction commits long after it was written (a caller's
// transaction that goes on working) is published, without waiting for the
// sweep, although events written after it were published meanwhile; in
// ordered mode before the next event of its aggregate.
func TestLateCommitter(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			e := newEnv(t)
			gc := newGoChannel()
			got := consume(t, gc, "account.deposited")
			r, err := relay.New(e.db, gc, relay.Config{Ordered: ordered, PollInterval: 20 * time.Millisecond,
				SweepInterval: time.Hour, LeaseDuration: 3 * time.Second, PublishTimeout: time.Second, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			e.run(r)
			e.write(1, 1) // the relay has made its indexes (which waits for open writers)
			eventually(t, 10*time.Second, "the relay running", func() bool { return got.distinct() == 1 })
			stopTraffic := make(chan struct{})
			trafficDone := make(chan struct{})
			go func() {
				defer close(trafficDone)
				for {
					select {
					case <-stopTraffic:
						return
					case <-time.After(10 * time.Millisecond):
					}
					a := &Account{ID: uuid.New()}
					a.Record(Deposited{AccountID: a.ID})
					if err := e.db.Create(a).Error; err != nil {
						t.Error(err)
						return
					}
				}
			}()
			late := &Account{ID: uuid.New()}
			late.Record(Deposited{AccountID: late.ID, Seq: 0})
			first := late.Records()[0].ID
			publishedMeanwhile := 0
			if err := e.db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(late).Error; err != nil {
					return err
				}
				// Events written after this one are published meanwhile.
				base := got.distinct()
				eventually(t, 10*time.Second, "other events published meanwhile", func() bool { return got.distinct() >= base+50 })
				time.Sleep(500 * time.Millisecond)
				publishedMeanwhile = got.distinct() - base
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			// The next event of its aggregate, right after the commit.
			late.Record(Deposited{AccountID: late.ID, Seq: 1})
			second := late.Records()[0].ID
			if err := e.db.Save(late).Error; err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "the late event and the next one (the sweep is an hour away)", func() bool {
				return got.Count(first.String()) > 0 && got.Count(second.String()) > 0
			})
			close(stopTraffic)
			<-trafficDone
			t.Logf("%d events published while the late one's transaction was open", publishedMeanwhile)
			if ordered {
				checkOrder(t, map[uuid.UUID][]uuid.UUID{late.ID: {first, second}}, got)
			}
		})
	}
}

// The storage figures: on PostgreSQL the outbox's dead row versions climb
// while a transaction holds vacuum back, and the age of that transaction is
// known to a superuser (the tests' role).
func TestStorageFigures(t *testing.T) {
	e := newEnv(t)
	gc := newGoChannel()
	r, err := relay.New(e.db, gc, relay.Config{PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	holdXact(t, e.dsn)
	held := time.Now()
	e.write(200, 1)
	e.run(r)
	eventually(t, 10*time.Second, "published", func() bool { return e.pending() == 0 })
	var s relay.Stats
	eventually(t, 15*time.Second, "the dead tuples counted", func() bool {
		s, err = r.Stats(context.Background())
		return err == nil && s.DeadTuples >= 200
	})
	if s.TableBytes <= 0 || !s.OldestTransactionKnown || s.OldestTransactionAge < time.Since(held)-time.Second {
		t.Fatalf("stats = %+v; want the table's size and a transaction at least %v old", s, time.Since(held))
	}
}
