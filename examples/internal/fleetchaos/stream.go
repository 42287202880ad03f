package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/publishers/natsjs"
)

// stored is one message of the stream, the first time it was stored.
type stored struct {
	id, tenant, account string
	seq                 int
	at                  time.Time // when JetStream stored it
}

// streamRead is the run's stream, read whole in stream order.
type streamRead struct {
	first []stored // each message's first occurrence, in stream order
	dups  int      // messages stored more than once (allowed: at least once)
}

// readStream reads the run's stream whole, in stream order
// (brokertest.ReadStream): the order Herald promises, in ordered mode: an
// account's deposit stored only after the one before it was acknowledged.
func readStream(ctx context.Context, url, topic string) (streamRead, error) {
	var s streamRead
	var err error
	s.dups, err = brokertest.ReadStream(ctx, url, natsjs.DefaultStreamConfig(topic).Name, func(id string, m jetstream.Msg) {
		var d Deposited
		_ = json.Unmarshal(m.Data(), &d)
		ob := stored{id: id, tenant: m.Headers().Get(events.MetaTenant), account: d.AccountID.String(), seq: d.Seq}
		if md, err := m.Metadata(); err == nil {
			ob.at = md.Timestamp
		}
		s.first = append(s.first, ob)
	})
	return s, err
}
