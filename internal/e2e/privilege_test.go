package e2e

import (
	"context"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type Order struct {
	ID uuid.UUID `gorm:"type:uuid;primaryKey"`
	N  int
	aggregate.Root
}

type OrderPaid struct{ N int }

func (OrderPaid) EventType() string { return "order.paid" }

// The tables are created by the SQL migrations, as their owner. Then a writer
// role with only SELECT, INSERT on the outbox, a relay role with only SELECT,
// UPDATE, DELETE on it, and a consumer role with only SELECT, INSERT, DELETE on
// the inbox, none with DDL rights, do everything: write, relay, consume, clean.
//
// Without the relay's migration (its indexes only make it faster) the relay
// says it cannot create them and works without.
func TestLeastPrivilege(t *testing.T) {
	t.Run("all migrations", func(t *testing.T) { leastPrivilege(t, true) })
	t.Run("without the relay's migration", func(t *testing.T) { leastPrivilege(t, false) })
}

func leastPrivilege(t *testing.T, relayMigration bool) {
	t.Parallel()
	schema, dsn := pgtest.Schema(t)
	admin := pgtest.Admin(t)
	var ddl []string
	// Every migration, in order; without the relay's, none that changes the
	// relay's tables either.
	files, err := fs.Glob(migrations.Postgres(), "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !relayMigration && (strings.Contains(f, "_relay") || strings.Contains(f, "lease")) {
			continue
		}
		b, err := fs.ReadFile(migrations.Postgres(), f)
		if err != nil {
			t.Fatal(err)
		}
		ddl = append(ddl, string(b))
	}
	writer, relayRole, consumer := pgtest.Name("herald_w_"), pgtest.Name("herald_r_"), pgtest.Name("herald_c_")
	stmts := append(ddl,
		`CREATE TABLE orders (id uuid PRIMARY KEY, n int)`,
		`CREATE TABLE effects (message_id text)`,
		`CREATE ROLE `+writer+` LOGIN`, `CREATE ROLE `+relayRole+` LOGIN`, `CREATE ROLE `+consumer+` LOGIN`,
		`GRANT USAGE ON SCHEMA `+schema+` TO `+writer+`, `+relayRole+`, `+consumer,
		`GRANT SELECT, INSERT ON outbox_messages TO `+writer,
		`GRANT SELECT, INSERT, UPDATE ON orders TO `+writer,
		`GRANT SELECT, UPDATE, DELETE ON outbox_messages TO `+relayRole,
		`GRANT SELECT, INSERT, DELETE ON inbox_messages TO `+consumer,
		`GRANT INSERT ON effects TO `+consumer,
	)
	conn, err := admin.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), `SET search_path = `+schema); err != nil {
		t.Fatal(err)
	}
	for _, q := range stmts {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, r := range []string{writer, relayRole, consumer} {
			_, _ = admin.Exec(`DROP OWNED BY ` + r)
			_, _ = admin.Exec(`DROP ROLE ` + r)
		}
	})
	as := func(role string) string { return strings.Replace(dsn, "postgres@", role+"@", 1) }

	// Writer.
	wdb := pgtest.OpenDSN(t, as(writer), nil)
	if err := wdb.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		t.Fatal(err)
	}
	o := &Order{ID: uuid.New()}
	for i := range 3 {
		o.N = i
		o.Record(OrderPaid{N: i})
		if err := wdb.Transaction(func(tx *gorm.DB) error { return tx.Save(o).Error }); err != nil {
			t.Fatalf("writer: %v", err)
		}
	}

	// Relay.
	rdb := pgtest.OpenDSN(t, as(relayRole), nil)
	gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	r, err := relay.New(rdb, gc, relay.Config{PollInterval: 20 * time.Millisecond, DisableListen: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()

	// Consumer.
	cdb := pgtest.OpenDSN(t, as(consumer), nil)
	in, err := inbox.New(cdb, inbox.Config{Retention: time.Millisecond})
	if err != nil {
		t.Fatalf("consumer inbox: %v", err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(in.Middleware)
	router.AddConsumerHandler("effects", "order.paid", gc, func(msg *message.Message) error {
		return inbox.Tx(msg.Context()).Exec(`INSERT INTO effects VALUES (?)`, msg.UUID).Error
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	deadline := time.Now().Add(20 * time.Second)
	var effects, pending int64
	for time.Now().Before(deadline) {
		_ = admin.QueryRow(`SELECT count(*) FROM ` + schema + `.effects`).Scan(&effects)
		_ = admin.QueryRow(`SELECT count(*) FROM ` + schema + `.outbox_messages`).Scan(&pending)
		if effects == 3 && pending == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if effects != 3 || pending != 0 {
		t.Fatalf("%d effects, %d outbox rows left", effects, pending)
	}
	time.Sleep(10 * time.Millisecond)
	if n, err := in.Cleanup(context.Background()); err != nil || n != 3 {
		t.Fatalf("consumer cleanup: %d, %v", n, err)
	}
	if s, err := r.Stats(context.Background()); err != nil || s.Pending != 0 {
		t.Fatalf("relay stats: %+v, %v", s, err)
	}
}
