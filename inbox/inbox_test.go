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

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
)

func TestDuplicateSkipped(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int64
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(recordEffect(&calls)))
	msg := message.NewMessage(uuid.NewString(), []byte(`{}`))
	for range 3 {
		if out, err := h(msg.Copy()); err != nil || out != nil {
			t.Fatalf("h = %v, %v", out, err)
		}
	}
	if calls.Load() != 1 || e.effects()[msg.UUID] != 1 {
		t.Fatalf("calls %d, effects %v", calls.Load(), e.effects())
	}
	// Another consumer handles it once too.
	h2 := e.inbox(inbox.Config{Consumer: "other"}).Middleware(noPublish(recordEffect(&calls)))
	if _, err := h2(msg.Copy()); err != nil || calls.Load() != 2 {
		t.Fatalf("other consumer: %v, calls %d", err, calls.Load())
	}
}

func TestEventIDMetadataWins(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int64
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(recordEffect(&calls)))
	id := uuid.NewString()
	a := message.NewMessage(uuid.NewString(), nil)
	a.Metadata.Set(events.MetaID, id)
	b := message.NewMessage(uuid.NewString(), nil) // a broker gave it a new UUID
	b.Metadata.Set(events.MetaID, id)
	for _, m := range []*message.Message{a, b} {
		if _, err := h(m); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("handled %d times", calls.Load())
	}
}

func TestHandlerErrorAndPanicRollBack(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int64
	fail := atomic.Int32{} // 1: error, 2: panic
	h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(func(msg *message.Message) error {
		if err := recordEffect(&calls)(msg); err != nil {
			return err
		}
		switch fail.Load() {
		case 1:
			return errors.New("downstream refused")
		case 2:
			panic("handler bug")
		}
		return nil
	}))
	msg := message.NewMessage(uuid.NewString(), nil)
	fail.Store(1)
	if _, err := h(msg.Copy()); err == nil || !strings.Contains(err.Error(), "downstream refused") {
		t.Fatalf("error = %v", err)
	}
	fail.Store(2)
	if _, err := h(msg.Copy()); !errors.Is(err, inbox.ErrHandlerPanic) {
		t.Fatalf("panic error = %v", err)
	}
	if len(e.effects()) != 0 || e.count("inbox_messages") != 0 {
		t.Fatal("a failed handler's effect or inbox row was kept")
	}
	fail.Store(0)
	if _, err := h(msg.Copy()); err != nil {
		t.Fatal(err)
	}
	if _, err := h(msg.Copy()); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 || e.effects()[msg.UUID] != 1 {
		t.Fatalf("calls %d, effects %v", calls.Load(), e.effects())
	}
}

func TestInvalidIDs(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int64
	missing := message.NewMessage("", nil)
	malformed := message.NewMessage(uuid.NewString(), nil)
	malformed.Metadata.Set(events.MetaID, "not-a-uuid")
	nack := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(recordEffect(&calls)))
	if _, err := nack(missing); !errors.Is(err, inbox.ErrMissingID) {
		t.Fatalf("missing id: %v", err)
	}
	if _, err := nack(malformed); !errors.Is(err, inbox.ErrMalformedID) {
		t.Fatalf("malformed id: %v", err)
	}
	ack := e.inbox(inbox.Config{Consumer: "c", InvalidID: inbox.AckAndLog, Logger: quiet()}).Middleware(noPublish(recordEffect(&calls)))
	for _, m := range []*message.Message{missing, malformed} {
		if out, err := ack(m); err != nil || out != nil {
			t.Fatalf("ack and log: %v, %v", out, err)
		}
	}
	if calls.Load() != 0 {
		t.Fatal("handler called for a message with no usable id")
	}
}

// Two consumers receive the same message at the same moment: exactly one runs
// the handler's effect; the other waits on the key, then sees a duplicate. If
// the first fails, the second runs it.
func TestConcurrentDeliveries(t *testing.T) {
	for _, firstFails := range []bool{false, true} {
		t.Run(map[bool]string{false: "first commits", true: "first fails"}[firstFails], func(t *testing.T) {
			e := newEnv(t)
			var calls atomic.Int64
			started := make(chan struct{}, 2)
			h := e.inbox(inbox.Config{Consumer: "c"}).Middleware(noPublish(func(msg *message.Message) error {
				n := calls.Add(1)
				started <- struct{}{}
				if err := recordEffect(&atomic.Int64{})(msg); err != nil {
					return err
				}
				time.Sleep(300 * time.Millisecond) // hold the key while the other delivery arrives
				if firstFails && n == 1 {
					return errors.New("first delivery fails")
				}
				return nil
			}))
			msg := message.NewMessage(uuid.NewString(), nil)
			var (
				wg   sync.WaitGroup
				errs = make([]error, 2)
				took = make([]time.Duration, 2)
			)
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i == 1 {
						<-started // the first is inside its transaction, key taken
						started <- struct{}{}
					}
					t0 := time.Now()
					_, errs[i] = h(msg.Copy())
					took[i] = time.Since(t0)
				}()
			}
			wg.Wait()
			if got := e.effects()[msg.UUID]; got != 1 {
				t.Fatalf("%d effects, want exactly 1", got)
			}
			if firstFails {
				if errs[0] == nil || errs[1] != nil || calls.Load() != 2 {
					t.Fatalf("errs %v, calls %d", errs, calls.Load())
				}
			} else {
				if errs[0] != nil || errs[1] != nil || calls.Load() != 1 {
					t.Fatalf("errs %v, calls %d", errs, calls.Load())
				}
			}
			if took[1] < 150*time.Millisecond {
				t.Fatalf("the second delivery did not wait on the key (%v)", took[1])
			}
		})
	}
}

func TestRetentionCleanup(t *testing.T) {
	e := newEnv(t)
	in := e.inbox(inbox.Config{Retention: time.Hour, CleanupBatch: 7})
	if err := e.db.Exec(`INSERT INTO inbox_messages (consumer, message_id, processed_at)
		SELECT 'c', 'old-' || i, now() - interval '2 hours' FROM generate_series(1, 30) i`).Error; err != nil {
		t.Fatal(err)
	}
	if err := e.db.Exec(`INSERT INTO inbox_messages (consumer, message_id) SELECT 'c', 'new-' || i FROM generate_series(1, 5) i`).Error; err != nil {
		t.Fatal(err)
	}
	n, err := in.Cleanup(context.Background())
	if err != nil || n != 30 {
		t.Fatalf("cleanup deleted %d, %v", n, err)
	}
	if e.count("inbox_messages") != 5 {
		t.Fatal("recent ids removed")
	}
	// Run cleans on its own.
	in2 := e.inbox(inbox.Config{Retention: time.Millisecond, CleanupInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- in2.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for e.count("inbox_messages") != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil || e.count("inbox_messages") != 0 {
		t.Fatalf("Run: %v, %d left", err, e.count("inbox_messages"))
	}
}

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
