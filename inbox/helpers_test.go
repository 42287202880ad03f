package inbox_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Effect is what a handler does: one row per handled message.
type Effect struct {
	ID        uint `gorm:"primaryKey"`
	Consumer  string
	MessageID string
}

type env struct {
	t   *testing.T
	db  *gorm.DB
	dsn string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	db, dsn := pgtest.Setup(t, outboxhook.New(outboxhook.Config{}), &Effect{})
	return &env{t: t, db: db, dsn: dsn}
}

func (e *env) inbox(cfg inbox.Config) *inbox.Inbox {
	e.t.Helper()
	in, err := inbox.New(e.db, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

// effects counts effect rows per message id.
func (e *env) effects() map[string]int {
	e.t.Helper()
	var rows []Effect
	if err := e.db.Find(&rows).Error; err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range rows {
		out[r.MessageID]++
	}
	return out
}

func (e *env) count(table string) int64 {
	e.t.Helper()
	var n int64
	if err := e.db.Table(table).Count(&n).Error; err != nil {
		e.t.Fatal(err)
	}
	return n
}

// recordEffect is a handler that writes one Effect in the inbox's transaction
// and counts its calls.
func recordEffect(calls *atomic.Int64) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		calls.Add(1)
		tx := inbox.Tx(msg.Context())
		return tx.Create(&Effect{Consumer: message.HandlerNameFromCtx(msg.Context()), MessageID: msg.UUID}).Error
	}
}

func noPublish(h message.NoPublishHandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) { return nil, h(msg) }
}

var _ = context.Background

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }
