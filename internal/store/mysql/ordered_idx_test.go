package mysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/store/mysql"
)

// orderedIdx is 0002_relay's ordered index, which 0010_drop_ordered_idx drops.
const orderedIdx = "outbox_messages_ordered_idx"

// 0010_drop_ordered_idx drops an index no statement reads. On an outbox made
// before it, an ordered relay's Create and the checks pass and keep the
// index (dropping it is Migrate's), the ordered claims work with it there,
// and Migrate drops it; an outbox Herald makes has none, and Migrate over it
// finds nothing to drop (MySQL has no DROP INDEX IF EXISTS) and records the
// migration. The down migration brings the index back.
func TestOrderedIndexDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	drv := mysql.Driver{}
	inOrder := func(t *testing.T, db *sql.DB) {
		t.Helper()
		evs := []store.Row{event("a", store.Schedule{}), event("a", store.Schedule{}), event("b", store.Schedule{})}
		if _, _, err := drv.Outbox(outboxTable).Insert(ctx, db, store.OutboxInsertParams{Rows: evs}); err != nil {
			t.Fatal(err)
		}
		got := rowIDs(claimOrdered(t, db, 10).Rows())
		if len(got) != 3 || got[0] != evs[0].ID || got[1] != evs[1].ID || got[2] != evs[2].ID {
			t.Fatalf("ordered claim = %v, want %s, %s, %s", got, evs[0].ID, evs[1].ID, evs[2].ID)
		}
	}

	t.Run("made before", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		migrateBefore(t, db, 10)
		createOrdered(t, db, "over an outbox made before 0010")
		if !indexNames(t, db)[orderedIdx] {
			t.Fatal("the relay's Create dropped the ordered index of an outbox made before 0010: that is Migrate's")
		}
		inOrder(t, db)
		if _, err := migrate.Migrate(ctx, db, drv); err != nil {
			t.Fatal(err)
		}
		if indexNames(t, db)[orderedIdx] {
			t.Fatal("the ordered index is still there after Migrate")
		}
		createOrdered(t, db, "after Migrate")
		if indexNames(t, db)[orderedIdx] {
			t.Fatal("the relay's Create made the ordered index again")
		}
		applyMigration(t, db, "0010_drop_ordered_idx.down.sql")
		if !indexNames(t, db)[orderedIdx] {
			t.Fatal("the ordered index is not back after 0010's down")
		}
	})
	t.Run("made by Herald", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		createOrdered(t, db, "on a new outbox")
		if indexNames(t, db)[orderedIdx] {
			t.Fatal("Herald made the ordered index")
		}
		inOrder(t, db)
		done, err := migrate.Migrate(ctx, db, drv)
		if err != nil {
			t.Fatal(err)
		}
		if len(done) == 0 || done[len(done)-1] != 10 {
			t.Fatalf("Migrate over an outbox Herald made applied %v, want every migration up to 10", done)
		}
	})
}
