package inbox_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Effect is what a handler does: one row per handled message.
type Effect struct {
	ID        uint `gorm:"primaryKey"`
	Consumer  string
	MessageID string
}

// effectsOf counts effect rows per message id.
func effectsOf(t *testing.T, db *gorm.DB) map[string]int {
	t.Helper()
	var rows []Effect
	if err := db.Session(&gorm.Session{NewDB: true}).Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range rows {
		out[r.MessageID]++
	}
	return out
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

func runRouter(t *testing.T, r *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	<-r.Running()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, what, cond)
}
