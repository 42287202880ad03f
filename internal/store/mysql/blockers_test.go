package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/store/mysql"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// Names of 0009_blockers_idx's index and of 0002_relay's aggregate index it
// replaces, on the default outbox.
const (
	blockersIdx  = "outbox_messages_blockers_idx"
	aggregateIdx = "outbox_messages_aggregate_idx"
)

// indexNames is the set of the default outbox's indexes in db.
func indexNames(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	names, err := sqlkit.Column[string](context.Background(), db, `SELECT DISTINCT index_name FROM information_schema.statistics
WHERE table_schema = DATABASE() AND table_name = 'outbox_messages'`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// applyMigration runs the statements of the migration file on the default
// outbox in db, as its objects list them.
func applyMigration(t *testing.T, db *sql.DB, file string) {
	t.Helper()
	objs, err := migrate.Objects(mysql.Driver{}.Migrations(), file, store.DefaultOutbox, outboxTable, mysql.Quote)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		for _, q := range append([]string{o.SQL}, o.After...) {
			if _, err := db.ExecContext(context.Background(), q); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
	}
}

// migrateBefore applies the up migrations before version to db, as an
// earlier release made the outbox.
func migrateBefore(t *testing.T, db *sql.DB, version int64) {
	t.Helper()
	migs, err := migrate.Migrations(mysql.Driver{}.Migrations())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migs {
		if m.Version >= version {
			break
		}
		applyMigration(t, db, m.Up)
	}
}

// createOrdered makes (where missing) and checks the default outbox and an
// ordered relay's objects in db, as a relay's start does; when says when,
// for messages.
func createOrdered(t *testing.T, db *sql.DB, when string) {
	t.Helper()
	ctx, drv := context.Background(), mysql.Driver{}
	for what, err := range map[string]error{
		"outbox create": drv.Outbox(outboxTable).Create(ctx, db),
		"relay create":  drv.Relay(outboxTable).Create(ctx, db, store.RelayCreateParams{Ordered: true}),
		"outbox check":  drv.Outbox(outboxTable).Check(ctx, db),
		"relay check":   drv.Relay(outboxTable).Check(ctx, db, store.RelayCheckParams{Ordered: true}),
	} {
		if err != nil {
			t.Fatalf("%s %s: %v", what, when, err)
		}
	}
}

// blockerRows is how many rows of the outbox the blockers index keys (a
// retry or a scheduled event: the others' key is NULL).
func (e *scheduleEnv) blockerRows() int64 {
	e.t.Helper()
	var n int64
	if err := e.db.QueryRowContext(e.ctx, "SELECT COUNT(*) FROM `outbox_messages` FORCE INDEX (`"+blockersIdx+"`) WHERE blocker_type IS NOT NULL").Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// claimOrdered claims up to limit events in ordered mode (one partition)
// with a relay of its own (which looks the outbox's indexes up afresh).
func claimOrdered(t *testing.T, db *sql.DB, limit int) store.Batch {
	t.Helper()
	b, err := mysql.Driver{}.Relay(outboxTable).Claim(context.Background(), db, store.ClaimParams{Limit: limit, Ordered: &store.OrderedClaim{Partitions: 1, Owned: []int32{0}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// failFirst claims one event in ordered mode, checks it is want, and marks
// it failed, to be retried in an hour.
func failFirst(t *testing.T, db *sql.DB, want string) {
	t.Helper()
	b := claimOrdered(t, db, 1)
	if got := rowIDs(b.Rows()); len(got) != 1 || got[0] != want {
		t.Fatalf("first ordered claim = %v, want %s", got, want)
	}
	if _, err := b.MarkFailed(context.Background(), []store.Failure{{ID: want, Err: "boom", Delay: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The blockers index keys the retries and the scheduled events, the only
// events that can be pending and not due, and no other (theirs is NULL): an
// event published at its first attempt is under no aggregate in any index.
// An ordered relay's outbox has it instead of 0002's aggregate index, and
// its claims hold an aggregate's events back behind its retry through it.
func TestBlockersIndex(t *testing.T) {
	t.Parallel()
	e := newScheduleEnv(t)
	if ix := indexNames(t, e.db); !ix[blockersIdx] || ix[aggregateIdx] {
		t.Fatalf("indexes of a new ordered outbox: %v; want the blockers index, not the aggregate index", ix)
	}
	a := []store.Row{event("a-1", store.Schedule{}), event("a-1", store.Schedule{}), event("a-1", store.Schedule{})}
	e.insert(a...)
	e.insert(event("a-2", store.Schedule{After: time.Hour}))
	if n := e.blockerRows(); n != 1 {
		t.Fatalf("blockers index keys %d rows with 3 plain events and 1 scheduled, want 1", n)
	}
	failFirst(t, e.db, a[0].ID)
	if n := e.blockerRows(); n != 2 {
		t.Fatalf("blockers index keys %d rows after a failure, want 2 (the retry, the scheduled event)", n)
	}
	if got := rowIDs(claimOrdered(t, e.db, 10).Rows()); len(got) != 0 {
		t.Fatalf("ordered claim behind a waiting retry = %v, want nothing", got)
	}
	// A plain event of another aggregate written after the scheduled one
	// is not held back by it.
	b := event("a-3", store.Schedule{})
	e.insert(b)
	if got := rowIDs(claimOrdered(t, e.db, 10).Rows()); len(got) != 1 || got[0] != b.ID {
		t.Fatalf("ordered claim = %v, want the other aggregate's event %s", got, b.ID)
	}
	if _, err := e.db.ExecContext(e.ctx, "UPDATE `outbox_messages` SET available_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?", a[0].ID); err != nil {
		t.Fatal(err)
	}
	if got := rowIDs(claimOrdered(t, e.db, 3).Rows()); len(got) != 3 || got[0] != a[0].ID || got[1] != a[1].ID || got[2] != a[2].ID {
		t.Fatalf("ordered claim once the retry is due = %v, want the three in order", got)
	}
}

// An event that is neither scheduled nor a retry is due from its insert:
// one whose available_at lies ahead of the clock (the clock stepped back
// since its insert) is claimed in its aggregate's order, before the later
// event, not left behind while that one goes first (the blockers index
// keys neither).
func TestOrderedClaimAfterTheClockSteppedBack(t *testing.T) {
	t.Parallel()
	e := newScheduleEnv(t)
	first, later := event("a-1", store.Schedule{}), event("a-1", store.Schedule{})
	e.insert(first, later)
	if _, err := e.db.ExecContext(e.ctx, "UPDATE `outbox_messages` SET available_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = ?", first.ID); err != nil {
		t.Fatal(err)
	}
	if got := rowIDs(claimOrdered(t, e.db, 10).Rows()); len(got) != 2 || got[0] != first.ID || got[1] != later.ID {
		t.Fatalf("ordered claim = %v, want %s then %s", got, first.ID, later.ID)
	}
}

// On an outbox made before 0009_blockers_idx, an ordered relay's Create
// adds neither the generated columns nor the blockers index (altering a
// table that was there is Migrate's), the checks pass without them, and the
// claims look up through the aggregate index; after Migrate, through the
// blockers index. Either way an aggregate's events are held back behind its
// retry. An outbox made before it without the aggregate index (relayed in
// unordered mode so far) gets neither index: an ordered relay starts on it.
// The down migration brings the aggregate index back.
func TestBlockersIndexOnAnExistingOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	drv := mysql.Driver{}
	before := func(dropAggregate bool) *sql.DB {
		db := openDB(t)
		migrateBefore(t, db, 9)
		if dropAggregate {
			if _, err := db.ExecContext(ctx, "DROP INDEX `"+aggregateIdx+"` ON `outbox_messages`"); err != nil {
				t.Fatal(err)
			}
		}
		createOrdered(t, db, "over an outbox made before 0009")
		if ix := indexNames(t, db); ix[blockersIdx] || ix[aggregateIdx] == dropAggregate {
			t.Fatalf("indexes after the relay's Create over an outbox made before 0009: %v", ix)
		}
		return db
	}
	aggregates := 0
	heldBack := func(db *sql.DB) {
		t.Helper()
		aggregates++
		agg := fmt.Sprintf("a-%d", aggregates)
		evs := []store.Row{event(agg, store.Schedule{}), event(agg, store.Schedule{})}
		if _, _, err := drv.Outbox(outboxTable).Insert(ctx, db, store.OutboxInsertParams{Rows: evs}); err != nil {
			t.Fatal(err)
		}
		failFirst(t, db, evs[0].ID)
		if got := rowIDs(claimOrdered(t, db, 10).Rows()); len(got) != 0 {
			t.Fatalf("ordered claim behind a waiting retry = %v, want nothing", got)
		}
	}

	db := before(false)
	heldBack(db)
	if _, err := migrate.Migrate(ctx, db, drv); err != nil {
		t.Fatal(err)
	}
	if ix := indexNames(t, db); !ix[blockersIdx] || ix[aggregateIdx] {
		t.Fatalf("indexes after Migrate: %v", ix)
	}
	if got := rowIDs(claimOrdered(t, db, 10).Rows()); len(got) != 0 {
		t.Fatalf("ordered claim behind a waiting retry, through the blockers index = %v, want nothing", got)
	}
	heldBack(db)
	applyMigration(t, db, "0009_blockers_idx.down.sql")
	if ix := indexNames(t, db); ix[blockersIdx] || !ix[aggregateIdx] {
		t.Fatalf("indexes after 0009's down: %v", ix)
	}
	heldBack(db)

	heldBack(before(true))
}
