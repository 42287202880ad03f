package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/events"
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

// readStream reads the run's stream whole with an ordered consumer. Its order
// is the order Herald promises, in ordered mode: an account's deposit stored
// only after the one before it was acknowledged.
func readStream(ctx context.Context, url, topic string) (streamRead, error) {
	var s streamRead
	nc, err := nats.Connect(url)
	if err != nil {
		return s, fmt.Errorf("read stream: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return s, fmt.Errorf("read stream: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	name := natsjs.DefaultStreamConfig(topic).Name
	st, err := js.Stream(ctx, name)
	if err != nil {
		return s, fmt.Errorf("read stream %s: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return s, fmt.Errorf("read stream %s: %w", name, err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return s, fmt.Errorf("read stream %s: %w", name, err)
	}
	seen := map[string]bool{}
	for read := uint64(0); read < info.State.Msgs; {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return s, fmt.Errorf("read stream %s: %w", name, err)
		}
		for m := range batch.Messages() {
			read++
			id := m.Headers().Get(natsjs.WatermillUUIDHeader)
			if seen[id] {
				s.dups++
				continue
			}
			seen[id] = true
			var d Deposited
			_ = json.Unmarshal(m.Data(), &d)
			ob := stored{id: id, tenant: m.Headers().Get(events.MetaTenant), account: d.AccountID.String(), seq: d.Seq}
			if md, err := m.Metadata(); err == nil {
				ob.at = md.Timestamp
			}
			s.first = append(s.first, ob)
		}
		if err := batch.Error(); err != nil {
			return s, fmt.Errorf("read stream %s: %w", name, err)
		}
		if ctx.Err() != nil {
			return s, fmt.Errorf("read stream %s: %d of %d messages: %w", name, read, info.State.Msgs, ctx.Err())
		}
	}
	return s, nil
}
