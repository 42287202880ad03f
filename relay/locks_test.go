package relay_test

// What a writing transaction costs PostgreSQL's shared lock table
// (max_locks_per_transaction x max_connections entries for the whole server).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// bulkLine is a child entity that names its order as its aggregate
// (aggregate.Identified): its writers take the aggregate's lock.
type bulkLine struct {
	ID      uuid.UUID `gorm:"type:uuid;primaryKey"`
	OrderID uuid.UUID `gorm:"type:uuid"`
	N       int
	aggregate.Root
}

func (l *bulkLine) AggregateType() string { return "Order" }
func (l *bulkLine) AggregateID() string   { return l.OrderID.String() }

// lineAdded is bulkLine's event.
type lineAdded struct {
	OrderID uuid.UUID
	N       int
}

func (lineAdded) EventType() string { return "line.added" }

// A bulk import in one transaction, writing events of thousands of
// aggregates for seconds, holds a small bounded number of entries of the
// shared lock table: on a server whose table has a few hundred
// (max_locks_per_transaction=10), it commits, and both modes publish its
// events in order. Counted, between its statements: the backend's rows of
// pg_locks outside the fast path (those are the shared table's entries: its
// transaction id, the epoch lock; relation locks of weak modes live in the
// backend's 16 fast-path slots, row locks in the rows). Before, it took one advisory lock per aggregate and one per 10 ms
// epoch, and failed with "out of shared memory". The CI run writes 20,000
// events over 10,000 aggregates for 5s; HERALD_LONG_TESTS=1 writes 100,000
// for 30s.
func TestBulkTransactionLockFootprint(t *testing.T) {
	t.Parallel()
	total, aggs, span := 20_000, 10_000, 5*time.Second
	if testkit.Long() {
		total, span = 100_000, 30*time.Second
	}
	server := pgtest.Server(t, "max_locks_per_transaction=10", "max_connections=20")
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			schema := pgtest.Name("bulk_")
			admin := pgtest.OpenDSN(t, server, nil)
			testkit.Must(t, admin.Exec(`CREATE SCHEMA `+schema).Error)
			db := pgtest.OpenDSN(t, pgtest.WithSearchPath(server, schema), nil)
			testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{})))
			testkit.Must(t, db.AutoMigrate(&bulkLine{}))
			// The relay's objects first: their indexes are written too.
			gc := newGoChannel()
			got := consume(t, gc, "line.added")
			r, err := relay.New(db, gc, relay.Config{Ordered: ordered, Workers: 1, PublishConcurrency: 1,
				PollInterval: 50 * time.Millisecond, Logger: quietLogger()})
			testkit.Must(t, err)
			testkit.Must(t, r.Setup(context.Background()))

			orders := make([]uuid.UUID, aggs)
			for i := range orders {
				orders[i] = uuid.New()
			}
			ids := map[uuid.UUID][]uuid.UUID{}
			const batch = 200
			batches := total / batch
			var (
				most     int
				mostWhat string
			)
			err = db.Transaction(func(tx *gorm.DB) error {
				start := time.Now()
				for b := range batches {
					lines := make([]*bulkLine, batch)
					for i := range lines {
						n := b*batch + i
						l := &bulkLine{ID: uuid.New(), OrderID: orders[n%aggs], N: n}
						l.Record(lineAdded{OrderID: l.OrderID, N: n})
						ids[l.OrderID] = append(ids[l.OrderID], l.Records()[0].ID)
						lines[i] = l
					}
					if err := tx.Create(&lines).Error; err != nil {
						return fmt.Errorf("batch %d of %d, %v into the transaction: %w", b, batches, time.Since(start).Round(time.Millisecond), err)
					}
					// What the transaction holds between its statements (a
					// statement's own short locks, a relation extension or a
					// speculative insertion token, end with it).
					var (
						n    int
						what string
					)
					if err := tx.Raw(`SELECT count(*), coalesce(string_agg(locktype || ' ' || mode, ', ' ORDER BY locktype), '')
FROM pg_locks WHERE pid = pg_backend_pid() AND NOT fastpath`).Row().Scan(&n, &what); err != nil {
						return err
					}
					if n > most {
						most, mostWhat = n, what
					}
					if wait := time.Until(start.Add(span * time.Duration(b+1) / time.Duration(batches))); wait > 0 {
						time.Sleep(wait)
					}
				}
				return nil
			})
			testkit.Must(t, err)
			t.Logf("at most %d entries of the shared lock table held by the writer: %s", most, mostWhat)
			if most > 3 {
				t.Fatalf("the writer held %d entries of the shared lock table (%s); want at most 3", most, mostWhat)
			}

			testkit.Run(t, r.Run)
			eventually(t, 120*time.Second, "every event published", func() bool { return got.HasAll(idSet(ids)) })
			checkOrder(t, ids, got)
		})
	}
}
