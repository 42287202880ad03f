package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stored is what the broker holds: each topic's stream read from its first
// message to its last, in stream order.
type stored struct {
	order []observed // first occurrences, in stream order per stream
	dups  int        // messages stored more than once
}

// readStreams reads every topic's stream whole with an ordered consumer. Its
// order is the order Herald promises (each event published only after the
// one before it of its aggregate was acknowledged); a live subscriber can see
// another one, as JetStream redelivers a message whose delivery was lost in a
// broker outage after the ack wait, behind later ones.
func readStreams(ctx context.Context, url string, topics []string) (stored, error) {
	var s stored
	nc, err := natsgo.Connect(url)
	if err != nil {
		return s, fmt.Errorf("read streams: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return s, fmt.Errorf("read streams: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, t := range topics {
		st, err := js.Stream(ctx, t)
		if err != nil {
			return s, fmt.Errorf("read stream %s: %w", t, err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return s, fmt.Errorf("read stream %s: %w", t, err)
		}
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return s, fmt.Errorf("read stream %s: %w", t, err)
		}
		seen := map[string]bool{}
		for read := uint64(0); read < info.State.Msgs; {
			batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				return s, fmt.Errorf("read stream %s: %w", t, err)
			}
			for m := range batch.Messages() {
				read++
				id := m.Headers().Get(wmnats.WatermillUUIDHdr)
				if seen[id] {
					s.dups++
					continue
				}
				seen[id] = true
				ob := decodeObserved(id, m.Data())
				if md, err := m.Metadata(); err == nil {
					ob.pos = fmt.Sprintf("%s seq %d, stored %s", t, md.Sequence.Stream, md.Timestamp.Format("15:04:05.000"))
				}
				s.order = append(s.order, ob)
			}
			if err := batch.Error(); err != nil {
				return s, fmt.Errorf("read stream %s: %w", t, err)
			}
			if ctx.Err() != nil {
				return s, fmt.Errorf("read stream %s: %d of %d messages: %w", t, read, info.State.Msgs, ctx.Err())
			}
		}
	}
	return s, nil
}

// decodeObserved is event id's account and version, from its payload.
func decodeObserved(id string, payload []byte) observed {
	var d Deposited
	_ = json.Unmarshal(payload, &d)
	return observed{id: id, account: d.AccountID.String(), version: d.Version}
}

// violations counts the events first found after a later version of their
// account.
func violations(order []observed) int { return len(violationPairs(order)) }

// violationPairs is, for each event first found after a later version of its
// account, that event and the latest version found before it.
func violationPairs(order []observed) [][2]observed {
	var out [][2]observed
	last := map[string]observed{}
	for _, ob := range order {
		if l, ok := last[ob.account]; ok && ob.version < l.version {
			out = append(out, [2]observed{ob, l})
			continue
		}
		last[ob.account] = ob
	}
	return out
}
