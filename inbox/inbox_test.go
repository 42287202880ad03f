package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
)

// The inbox's configuration, and PostgreSQL-specific tests; its behaviour on
// every database is the conformance suite's (internal/conformance).

func TestConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []inbox.Config{
		{Table: "a.b.c"},
		{Retention: -time.Second},
		{InvalidID: 7},
		{Retention: time.Minute, RetryHorizon: time.Hour},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", c)
		}
	}
	err := inbox.Config{Retention: time.Minute, RetryHorizon: time.Hour}.Validate()
	if !errors.Is(err, inbox.ErrRetentionTooShort) {
		t.Fatalf("short retention: %v", err)
	}
	if err := (inbox.Config{RetryHorizon: 19 * time.Minute}).Validate(); err != nil {
		t.Fatalf("default retention against the relay's default horizon: %v", err)
	}
}

// The inbox adds one statement per message, its INSERT, and no SELECT; a
// duplicate costs that INSERT alone. Counted on the connection (pgx's tracer),
// so nothing sent escapes the count (transaction control aside).
func TestOneStatementPerMessage(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.Schema(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		stmts []string
	)
	cfg.Tracer = traceFunc(func(sql string) {
		mu.Lock()
		defer mu.Unlock()
		if s := strings.ToUpper(strings.TrimSpace(sql)); !strings.HasPrefix(s, "BEGIN") && !strings.HasPrefix(s, "COMMIT") && !strings.HasPrefix(s, "ROLLBACK") {
			stmts = append(stmts, sql)
		}
	})
	sqlDB := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Effect{}); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(db, inbox.Config{Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	h := in.Middleware(noPublish(recordEffect(&calls)))
	msg := message.NewMessage(uuid.NewString(), nil)
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := stmts
		stmts = nil
		return out
	}
	take()
	if _, err := h(msg.Copy()); err != nil {
		t.Fatal(err)
	}
	if got := take(); len(got) != 2 || !strings.HasPrefix(got[0], `INSERT INTO "inbox_messages"`) || !strings.HasPrefix(got[1], `INSERT INTO "effects"`) {
		t.Fatalf("statements for a new message: %q", got)
	}
	if _, err := h(msg.Copy()); err != nil {
		t.Fatal(err)
	}
	if got := take(); len(got) != 1 || !strings.HasPrefix(got[0], `INSERT INTO "inbox_messages"`) {
		t.Fatalf("statements for a duplicate: %q", got)
	}
}

// traceFunc is a pgx tracer that reports each statement's SQL.
type traceFunc func(sql string)

func (f traceFunc) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	f(d.SQL)
	return ctx
}

func (traceFunc) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
