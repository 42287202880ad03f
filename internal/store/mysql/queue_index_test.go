package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/mysqltest"
	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/store/migrate"
	"github.com/heraldgo/herald/internal/store/mysql"
	"github.com/heraldgo/herald/internal/store/sqlkit"
)

// 0006_queue_index replaces the pending index of 0001. Self-creation makes
// it with an outbox it creates; over an outbox made before it (0001's
// index) it changes nothing (an index build and drop on a table in use are
// for Migrate, when the operator chooses), the check does not ask for it,
// and Migrate replaces the index.
func TestQueueIndexReplacesThePendingIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tbl := ident.MustTable(store.DefaultOutbox)
	open := func() *sql.DB {
		db, err := sql.Open("mysql", mysqltest.Database(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	indexes := func(db *sql.DB) (queue, pending bool) {
		t.Helper()
		names, err := sqlkit.Column[string](ctx, db, `SELECT DISTINCT index_name FROM information_schema.statistics
WHERE table_schema = DATABASE() AND table_name = ?`, string(tbl.Name))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			queue = queue || n == "outbox_messages_queue_idx"
			pending = pending || n == "outbox_messages_pending_idx"
		}
		return queue, pending
	}
	drv := mysql.Driver{}

	fresh := open()
	if err := drv.Outbox(tbl).Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if q, p := indexes(fresh); !q || p {
		t.Fatalf("a new outbox: queue index %v, pending index %v; want the queue index alone", q, p)
	}

	old := open()
	applyMigration(t, old, "0001_outbox_messages.up.sql")
	if err := drv.Outbox(tbl).Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := drv.Relay(tbl).Create(ctx, old, store.RelayCreateParams{}); err != nil {
		t.Fatal(err)
	}
	if q, p := indexes(old); q || !p {
		t.Fatalf("self-creation over an outbox made before 0006: queue index %v, pending index %v; want it left as it was", q, p)
	}
	// The check names the later migration that adds columns (0007), not
	// this one.
	if err := drv.Outbox(tbl).Check(ctx, old); !errors.Is(err, store.ErrSchemaOutdated) ||
		strings.Contains(err.Error(), "0006") || !strings.Contains(err.Error(), "0007_schedule") {
		t.Fatalf("check of an outbox made before 0006: %v", err)
	}
	if _, err := migrate.Migrate(ctx, old, drv); err != nil {
		t.Fatal(err)
	}
	if q, p := indexes(old); !q || p {
		t.Fatalf("after Migrate: queue index %v, pending index %v; want the queue index alone", q, p)
	}
}
