package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/walrelay"
)

// walEnv is a database of the logical-level server written in StorageWAL
// (no outbox table), with a WAL relay's slot made.
func walEnv(t *testing.T) (db *gorm.DB, dsn, slot string) {
	t.Helper()
	db, dsn = logicaltest.Open(t, nil)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Storage: outboxhook.StorageWAL, Topic: testkit.OpsTopic})))
	slot = logicaltest.SlotName()
	testkit.Must(t, walrelay.Setup(ctx, dsn, walrelay.Config{Slot: slot, Logger: testkit.Quiet()}))
	// Setup also makes the table the relay parks refused events in; without
	// it (a slot made by hand, a relay never set up here) the page and
	// api/status work on the slot alone.
	testkit.Must(t, db.Exec(`DROP TABLE outbox_messages`).Error)
	return db, dsn, slot
}

func report(t *testing.T, h http.Handler) (admin.Report, string) {
	t.Helper()
	return getJSON[admin.Report](t, h, "/api/status")
}

// With WALSlot and no outbox table (StorageWAL), the page and api/status show
// the slot; a lag past MaxWALLag makes the outbox unhealthy, and so does a
// slot that is missing.
func TestHandlerWALSlot(t *testing.T) {
	t.Parallel()
	db, _, slot := walEnv(t)
	h, err := admin.New(db, admin.Config{WALSlot: slot, MaxWALLag: 100_000, Logger: testkit.Quiet()})
	testkit.Must(t, err)

	rep, body := report(t, h)
	w := rep.Status.WAL
	if w == nil || w.Slot != slot || !w.Exists || w.Active || w.WALStatus != "reserved" || !rep.Status.TableMissing ||
		!strings.Contains(body, `"lag_bytes"`) || len(rep.Dead) != 0 || len(rep.Failing) != 0 {
		t.Fatalf("report %s", body)
	}
	// The lag: other tests' WAL counts too (it is the server's), so only
	// a large write is sure to pass the limit.
	for range 30 {
		testkit.Must(t, outboxhook.Add(db, OrderPlaced{OrderID: strings.Repeat("x", 10_000)}))
	}
	rep, body = report(t, h)
	if rep.Status.Healthy || len(rep.Status.Problems) != 1 || !strings.Contains(rep.Status.Problems[0], "WAL slot "+slot+" lags by") {
		t.Fatalf("a slot 300 kB behind, over MaxWALLag 100 kB: %s", body)
	}
	res, page := serve(t, h, get("/"))
	if res.Code != http.StatusOK || !strings.Contains(page, `id="wal-slot"`) || !strings.Contains(page, slot) ||
		!strings.Contains(page, "no relay streams it") || !strings.Contains(page, "lags by") || strings.Contains(page, `id="topics"`) {
		t.Fatalf("GET /: %d\n%s", res.Code, page)
	}

	// Within the limit: healthy.
	h, err = admin.New(db, admin.Config{WALSlot: slot, Logger: testkit.Quiet()})
	testkit.Must(t, err)
	if rep, body := report(t, h); !rep.Status.Healthy || rep.Status.WAL.LagBytes < 300_000 {
		t.Fatalf("a slot 300 kB behind, within the default 1 GiB: %s", body)
	}

	// Missing.
	h, err = admin.New(db, admin.Config{WALSlot: "nowhere", Logger: testkit.Quiet()})
	testkit.Must(t, err)
	rep, body = report(t, h)
	if rep.Status.Healthy || rep.Status.WAL.Exists || !strings.Contains(strings.Join(rep.Status.Problems, ";"), "does not exist") {
		t.Fatalf("a missing slot: %s", body)
	}
	if _, page := serve(t, h, get("/")); !strings.Contains(page, "missing") {
		t.Fatalf("GET /: %s", page)
	}
}

// With a table and a slot, Status has both; Open accepts a missing table
// only with WALSlot; WALSlot needs PostgreSQL.
func TestStatusWALSlotWithTable(t *testing.T) {
	t.Parallel()
	db, dsn, slot := walEnv(t)
	if _, err := admin.Open(ctx, db, admin.Config{}); err == nil {
		t.Fatal("Open without WALSlot found a table StorageWAL never made")
	}
	// Another writer of the database keeps a table.
	tdb := testkit.Postgres.Open(t, dsn, nil)
	testkit.Must(t, tdb.Use(outboxhook.New(outboxhook.Config{Topic: testkit.OpsTopic})))
	testkit.AddEvents(t, ctx, tdb, OrderPlaced{OrderID: "1"})
	o, err := admin.Open(ctx, db, admin.Config{WALSlot: slot})
	testkit.Must(t, err)
	s, err := o.Status(ctx)
	testkit.Must(t, err)
	if s.TableMissing || s.Total.Pending != 1 || s.WAL == nil || !s.WAL.Exists || !s.Healthy {
		t.Fatalf("status %+v", s)
	}

	if _, err := admin.New(testkit.SQLite.OpenNew(t, nil), admin.Config{WALSlot: "herald"}); err == nil {
		t.Fatal("WALSlot accepted on SQLite")
	}
	if _, err := admin.New(db, admin.Config{WALSlot: "Not-A-Slot"}); err == nil {
		t.Fatal("an invalid WALSlot accepted")
	}
}
