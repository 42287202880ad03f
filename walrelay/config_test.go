package walrelay_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/walrelay"
)

// The defaults New applies are the documented ones: the relay streams the
// prefix the outbox hook writes by default, and parks in the table relay's
// default table.
func TestConfigDefaults(t *testing.T) {
	r, err := walrelay.New("postgres://herald@127.0.0.1/none", nopPublisher{}, walrelay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.Config()
	if cfg.Prefix != outboxhook.DefaultWALPrefix || cfg.Table != relay.DefaultTable || cfg.Slot != walrelay.DefaultSlot ||
		cfg.Publication != walrelay.DefaultPublication || cfg.MaxHeld != walrelay.DefaultMaxHeld || cfg.BatchSize != walrelay.DefaultBatchSize {
		t.Fatalf("defaults %+v", cfg)
	}
	if _, err := walrelay.New("postgres://%zz", nopPublisher{}, walrelay.Config{}); err == nil {
		t.Fatal("New took a DSN that does not parse")
	}
}

// nopPublisher publishes nothing.
type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }
