package inbox_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Effect is what a handler does: one row per handled message.
type Effect struct {
	ID        uint `gorm:"primaryKey"`
	Consumer  string
	MessageID string
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
