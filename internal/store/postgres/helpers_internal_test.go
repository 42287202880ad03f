package postgres

import (
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/ident"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/store"
)

// orderedOutbox makes, in a schema of the test's own, the outbox and the
// relay's additions of ordered mode, and returns the handle, the outbox and
// the relay.
func orderedOutbox(t *testing.T) (*sql.DB, *outbox, *relay) {
	t.Helper()
	db := pgtest.SchemaDB(t)
	tbl := ident.MustTable("outbox_messages")
	o, r := newOutbox(tbl), newRelay(tbl)
	if err := o.Create(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	if err := r.Create(t.Context(), db, store.RelayCreateParams{Ordered: true}); err != nil {
		t.Fatal(err)
	}
	return db, o, r
}

// insertEvent inserts an event of aggregate ("account", "a") with schedule s
// and version, and returns its id.
func insertEvent(t *testing.T, db *sql.DB, o *outbox, version int, s store.Schedule) string {
	t.Helper()
	ev := store.Row{ID: uuid.NewString(), Type: "t", Version: version, AggregateType: "account", AggregateID: "a",
		Topic: "t", Payload: []byte(`{}`), Metadata: []byte(`{}`), OccurredAt: time.Now(), Schedule: s}
	if _, _, err := o.Insert(t.Context(), db, store.OutboxInsertParams{Rows: []store.Row{ev}}); err != nil {
		t.Fatal(err)
	}
	return ev.ID
}
