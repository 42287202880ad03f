package brokertest

import (
	"context"
	"fmt"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadStream reads the JetStream stream name on the server at url whole, in
// stream order, with an ordered consumer (within two minutes), and calls
// first for the first occurrence of each message (by its Watermill UUID); it
// returns how many messages were stored again after their first. That order
// is the order Herald promises: a live subscriber can see another one, as
// JetStream redelivers a message whose delivery was lost in a broker outage
// after the ack wait, behind later ones.
func ReadStream(ctx context.Context, url, name string, first func(id string, m jetstream.Msg)) (dups int, err error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", name, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", name, err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", name, err)
	}
	seen := map[string]bool{}
	for read := uint64(0); read < info.State.Msgs; {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return dups, fmt.Errorf("read stream %s: %w", name, err)
		}
		for m := range batch.Messages() {
			read++
			id := m.Headers().Get(wmnats.WatermillUUIDHdr)
			if seen[id] {
				dups++
				continue
			}
			seen[id] = true
			first(id, m)
		}
		if err := batch.Error(); err != nil {
			return dups, fmt.Errorf("read stream %s: %w", name, err)
		}
		if ctx.Err() != nil {
			return dups, fmt.Errorf("read stream %s: %d of %d messages: %w", name, read, info.State.Msgs, ctx.Err())
		}
	}
	return dups, nil
}
