package outboxhook_test

// PostgreSQL-specific tests of the plugin and its configuration; the write
// path's behaviour on every database is the conformance suite's
// (internal/conformance).

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, bad := range []outboxhook.Config{
		{Table: "a.b.c"},
		{Table: `x"; DROP TABLE y; --`},
		{MaxPayloadBytes: -1},
		{MaxPayloadBytes: 16 << 20}, // over what MariaDB takes in a statement by default
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", bad)
		}
		db := pgtest.Open(t, nil)
		if err := db.Use(outboxhook.New(bad)); err == nil {
			t.Errorf("db.Use accepted %+v", bad)
		}
	}
	if err := (outboxhook.Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	c := outboxhook.New(outboxhook.Config{}).Config()
	if c.Table != "outbox_messages" || c.MaxPayloadBytes != outboxhook.DefaultMaxPayloadBytes || c.Codec == nil || c.Topic == nil {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestCustomTable(t *testing.T) {
	t.Parallel()
	schema, dsn := pgtest.Schema(t)
	db := pgtest.OpenDSN(t, dsn, nil)
	must(t, db.Use(outboxhook.New(outboxhook.Config{Table: schema + ".events_out"})))
	must(t, db.AutoMigrate(&Order{}))
	must(t, db.Create(NewOrder()).Error)
	if count(t, db, schema+".events_out") != 1 {
		t.Fatal("event not in the custom table")
	}
	var idx int64
	must(t, db.Raw(`SELECT count(*) FROM pg_indexes WHERE schemaname = ? AND indexname = 'events_out_pending_idx'`, schema).Scan(&idx).Error)
	if idx != 1 {
		t.Fatal("pending index missing")
	}
}

// The table is created by the migration as its owner; a writer role with only
// SELECT and INSERT on it, and no right to create anything, uses the plugin.
func TestLeastPrivilegeWriter(t *testing.T) {
	t.Parallel()
	schema, dsn := pgtest.Schema(t)
	admin := pgtest.Admin(t)
	ddl, err := fs.ReadFile(migrations.Postgres(), "0001_outbox_messages.up.sql")
	must(t, err)
	locks, err := fs.ReadFile(migrations.Postgres(), "0006_aggregate_locks.up.sql")
	must(t, err)
	sched, err := fs.ReadFile(migrations.Postgres(), "0007_schedule.up.sql")
	must(t, err)
	role := pgtest.Name("herald_writer_")
	asRole(t, admin, schema, role,
		string(ddl),
		string(locks),
		string(sched),
		`CREATE TABLE orders (id uuid PRIMARY KEY, status text)`,
		`CREATE ROLE `+role+` LOGIN`,
		`GRANT USAGE ON SCHEMA `+schema+` TO `+role,
		`GRANT SELECT, INSERT ON outbox_messages TO `+role,
		`GRANT SELECT, INSERT, UPDATE ON orders TO `+role,
	)
	db := pgtest.OpenDSN(t, strings.Replace(dsn, "postgres@", role+"@", 1), nil)
	must(t, db.Use(outboxhook.New(outboxhook.Config{}))) // table present: no DDL tried
	o := NewOrder()
	must(t, db.Create(o).Error)
	o.Pay(1)
	must(t, db.Transaction(func(tx *gorm.DB) error { return tx.Save(o).Error }))
	o.Pay(2)
	must(t, db.Save(o).Error)
	wantTypes(t, db, "order.placed", "order.paid", "order.paid")
}

// An outbox made without migration 0006 (its statements from 0001, and
// 0007's columns) gets the aggregate locks table, filled, at db.Use, and the
// writers of an aggregate take its rows. A role that may not create it is
// refused at db.Use with ErrSchemaOutdated naming the migration.
func TestAggregateLocksTableAddedToAnExistingOutbox(t *testing.T) {
	t.Parallel()
	schema, dsn := pgtest.Schema(t)
	admin := pgtest.Admin(t)
	ddl, err := fs.ReadFile(migrations.Postgres(), "0001_outbox_messages.up.sql")
	must(t, err)
	sched, err := fs.ReadFile(migrations.Postgres(), "0007_schedule.up.sql")
	must(t, err)
	role := pgtest.Name("herald_writer_")
	asRole(t, admin, schema, role,
		string(ddl),
		string(sched),
		`CREATE ROLE `+role+` LOGIN`,
		`GRANT USAGE ON SCHEMA `+schema+` TO `+role,
		`GRANT SELECT, INSERT ON outbox_messages TO `+role,
	)
	add := func(db *gorm.DB) error {
		return db.Transaction(func(tx *gorm.DB) error {
			m := message.NewMessage(uuid.NewString(), []byte(`{}`))
			m.Metadata.Set(events.MetaType, "part.added")
			m.Metadata.Set(events.MetaAggregateType, "Order")
			m.Metadata.Set(events.MetaAggregateID, uuid.NewString())
			return outboxhook.AddMessages(tx, "parts", m)
		})
	}

	writer := pgtest.OpenDSN(t, strings.Replace(dsn, "postgres@", role+"@", 1), nil)
	if err := writer.Use(outboxhook.New(outboxhook.Config{})); !errors.Is(err, outboxhook.ErrSchemaOutdated) ||
		!strings.Contains(err.Error(), "0006_aggregate_locks") {
		t.Fatalf("db.Use by a role that may not create the locks table: %v; want ErrSchemaOutdated naming 0006", err)
	}

	owner := pgtest.OpenDSN(t, dsn, nil)
	must(t, owner.Use(outboxhook.New(outboxhook.Config{})))
	var rows int64
	must(t, owner.Raw(`SELECT count(*) FROM outbox_messages_locks`).Scan(&rows).Error)
	if rows != 65536 {
		t.Fatalf("%d rows in the locks table made at db.Use; want 65536", rows)
	}
	must(t, add(owner))
}

// All events of one statement go in one INSERT: a statement-level trigger counts
// the INSERT statements on the outbox.
func TestOneInsertPerStatement(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, db.Exec(`CREATE TABLE stmt_count (n int NOT NULL); INSERT INTO stmt_count VALUES (0)`).Error)
	must(t, db.Exec(`CREATE FUNCTION count_stmt() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN UPDATE stmt_count SET n = n + 1; RETURN NULL; END$$`).Error)
	must(t, db.Exec(`CREATE TRIGGER count_stmt AFTER INSERT ON outbox_messages FOR EACH STATEMENT EXECUTE FUNCTION count_stmt()`).Error)
	orders := []*Order{NewOrder(), NewOrder(), NewOrder()}
	for _, o := range orders {
		o.Pay(1)
	}
	must(t, db.Create(&orders).Error)
	var n int
	must(t, db.Raw(`SELECT n FROM stmt_count`).Scan(&n).Error)
	if got := count(t, db, "outbox_messages"); got != 6 || n != 1 {
		t.Fatalf("%d events in %d INSERT statements, want 6 in 1", got, n)
	}
}

// asRole runs stmts as admin in schema, then drops what role owns and role
// when the test ends.
func asRole(t *testing.T, admin *sql.DB, schema, role string, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		conn, err := admin.Conn(context.Background())
		must(t, err)
		_, err = conn.ExecContext(context.Background(), `SET search_path = `+schema+`; `+q)
		_ = conn.Close()
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(`DROP OWNED BY ` + role)
		_, _ = admin.Exec(`DROP ROLE ` + role)
	})
}
