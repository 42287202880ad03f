package outboxhook_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
)

// Bad input fails the save with a wrapped error, and nothing is written: neither
// the business row nor any event.
func TestBadInput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		event  events.Event
		target error
	}{
		{"channel field", WithChan{C: make(chan int)}, outboxhook.ErrEncode},
		{"NaN", WithFloat{F: nan}, outboxhook.ErrEncode},
		{"empty type", NoType{}, events.ErrEmptyType},
		{"oversize payload", Big{Data: strings.Repeat("x", 2048)}, outboxhook.ErrPayloadTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := setup(t, outboxhook.Config{MaxPayloadBytes: 1024}, nil)
			for _, run := range []struct {
				name string
				save func(db *gorm.DB, o *Order) error
			}{
				{"default tx", func(db *gorm.DB, o *Order) error { return db.Create(o).Error }},
				{"user tx", func(db *gorm.DB, o *Order) error {
					return db.Transaction(func(tx *gorm.DB) error { return tx.Create(o).Error })
				}},
				{"no tx", func(db *gorm.DB, o *Order) error {
					return db.Session(&gorm.Session{SkipDefaultTransaction: true}).Create(o).Error
				}},
				{"update", func(db *gorm.DB, o *Order) error {
					must(t, db.Session(&gorm.Session{NewDB: true}).Exec(`INSERT INTO orders (id, status) VALUES (?, 'new')`, o.ID).Error)
					defer db.Session(&gorm.Session{NewDB: true}).Exec(`DELETE FROM orders`)
					if err := db.Model(o).Update("status", "changed").Error; err != nil {
						var status string
						must(t, db.Session(&gorm.Session{NewDB: true}).Raw(`SELECT status FROM orders`).Scan(&status).Error)
						if status != "new" {
							t.Errorf("update kept despite the error")
						}
						return err
					}
					return nil
				}},
			} {
				o := NewOrder()
				o.Record(c.event)
				err := run.save(db, o)
				wantErrIs(t, err, c.target)
				if run.name != "update" && count(t, db, "orders") != 0 {
					t.Fatalf("%s: business row written", run.name)
				}
				if count(t, db, "outbox_messages") != 0 {
					t.Fatalf("%s: events written", run.name)
				}
			}
		})
	}
}

// Hooked records an event its encoding refuses from its AfterCreate hook: the
// failure is found after the row was written.
type Hooked struct {
	ID uint `gorm:"primaryKey"`
	aggregate.Root
}

func (h *Hooked) AfterCreate(*gorm.DB) error {
	h.Record(WithFloat{F: nan})
	return nil
}

// A transaction the caller opened cannot commit the business row when its events
// could not be written, even if the caller ignores the error.
func TestFailureAfterWriteAbortsCallersTransaction(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&Hooked{}))
	h := &Hooked{}
	h.Record(DocEvent{})
	tx := db.Begin()
	wantErrIs(t, tx.Create(h).Error, outboxhook.ErrEncode)
	_ = tx.Commit() // ignoring the error: PostgreSQL rolls back
	if count(t, db, "hookeds") != 0 || count(t, db, "outbox_messages") != 0 {
		t.Fatal("the caller committed the row without its events")
	}
	// In a transaction GORM opened, the same failure rolls back as usual.
	h2 := &Hooked{}
	wantErrIs(t, db.Create(h2).Error, outboxhook.ErrEncode)
	if count(t, db, "hookeds") != 0 {
		t.Fatal("row kept")
	}
}

type Keyless struct {
	ID   uuid.UUID `gorm:"type:uuid;primaryKey"`
	Name string
	aggregate.Root
}

type SelfNamed struct {
	Code string `gorm:"primaryKey"`
	aggregate.Root
}

func (s *SelfNamed) AggregateType() string { return "catalog.item" }
func (s *SelfNamed) AggregateID() string   { return "item-" + s.Code }

func TestEmptyAggregateID(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, db.AutoMigrate(&Keyless{}, &SelfNamed{}))
	k := &Keyless{Name: "no id"} // zero uuid, no database default
	k.Record(DocEvent{})
	wantErrIs(t, db.Create(k).Error, outboxhook.ErrEmptyAggregateID)
	if count(t, db, "keylesses") != 0 || count(t, db, "outbox_messages") != 0 {
		t.Fatal("written despite the empty id")
	}

	s := &SelfNamed{Code: "a"}
	s.Record(DocEvent{})
	must(t, db.Create(s).Error)
	rows := wantTypes(t, db, "doc.changed")
	if rows[0].AggregateType != "catalog.item" || rows[0].AggregateID != "item-a" {
		t.Fatalf("row = %+v", rows[0])
	}
}

func TestTableMissingWithoutAutoCreate(t *testing.T) {
	db := setup(t, outboxhook.Config{DisableAutoCreate: true}, nil)
	o := NewOrder()
	wantErrIs(t, db.Create(o).Error, outboxhook.ErrTableMissing)
	if count(t, db, "orders") != 0 {
		t.Fatal("business row written without the outbox table")
	}
	wantErrIs(t, outboxhook.Add(db, DocEvent{}), outboxhook.ErrTableMissing)
}

func TestAdd(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, db.Transaction(func(tx *gorm.DB) error {
		return outboxhook.Add(tx, DocEvent{Note: "a"}, DocEvent{Note: "b"})
	}))
	_ = db.Transaction(func(tx *gorm.DB) error {
		must(t, outboxhook.Add(tx, DocEvent{Note: "rolled back"}))
		return errBoom
	})
	must(t, outboxhook.Add(db, OrderPaid{Amount: 1})) // no transaction: one statement
	rows := wantTypes(t, db, "doc.changed", "doc.changed", "order.paid")
	if rows[0].AggregateType != "" || rows[0].AggregateID != "" || decode(t, rows[1].Payload)["Note"] != "b" {
		t.Fatalf("rows = %+v", rows)
	}
	wantErrIs(t, outboxhook.Add(db, WithChan{}), outboxhook.ErrEncode)

	plain := pgtest.Open(t, nil)
	wantErrIs(t, outboxhook.Add(plain, DocEvent{}), outboxhook.ErrNotRegistered)
}

func TestMetadataAndTopic(t *testing.T) {
	db := setup(t, outboxhook.Config{
		Topic: func(env *events.Envelope) string { return "svc." + env.AggregateType + "." + env.Type },
	}, nil)
	ctx := events.WithMetadata(context.Background(), events.Metadata{"correlation_id": "c-1", "actor": "ctx"})
	o := &Order{ID: uuid.New()}
	o.RecordWithMetadata(OrderPlaced{OrderID: o.ID}, events.Metadata{"actor": "record"})
	must(t, db.WithContext(ctx).Create(o).Error)
	must(t, outboxhook.Add(db.WithContext(ctx), DocEvent{}))
	rows := wantTypes(t, db, "order.placed", "doc.changed")
	var md events.Metadata
	must(t, json.Unmarshal([]byte(rows[0].Metadata), &md))
	if md["correlation_id"] != "c-1" || md["actor"] != "record" {
		t.Fatalf("metadata = %v", md)
	}
	if rows[0].Topic != "svc.Order.order.placed" || rows[1].Topic != "svc..doc.changed" {
		t.Fatalf("topics = %q, %q", rows[0].Topic, rows[1].Topic)
	}
}

type V2Event struct{ A int }

func (V2Event) EventType() string { return "v2" }
func (V2Event) EventVersion() int { return 2 }

func TestVersion(t *testing.T) {
	db := setup(t, outboxhook.Config{}, nil)
	must(t, outboxhook.Add(db, V2Event{A: 1}))
	if rows := wantTypes(t, db, "v2"); rows[0].Version != 2 {
		t.Fatalf("version = %d", rows[0].Version)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, bad := range []outboxhook.Config{
		{Table: "a.b.c"},
		{Table: `x"; DROP TABLE y; --`},
		{MaxPayloadBytes: -1},
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
	if c.Table != "outbox_messages" || c.MaxPayloadBytes != 1<<20 || c.Codec == nil || c.Topic == nil {
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
	role := pgtest.Name("herald_writer_")
	for _, q := range []string{
		`SET search_path = ` + schema,
		string(ddl),
		`CREATE TABLE orders (id uuid PRIMARY KEY, status text)`,
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT SELECT, INSERT ON outbox_messages TO ` + role,
		`GRANT SELECT, INSERT, UPDATE ON orders TO ` + role,
	} {
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
