package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/examples/internal/brokertest"
)

// stored is what the broker holds: each topic's stream read from its first
// message to its last, in stream order.
type stored struct {
	order []observed // first occurrences, in stream order per stream
	dups  int        // messages stored more than once
}

// readStreams reads every topic's stream whole, in stream order
// (brokertest.ReadStream: the order Herald promises).
func readStreams(ctx context.Context, url string, topics []string) (stored, error) {
	var s stored
	for _, t := range topics {
		dups, err := brokertest.ReadStream(ctx, url, t, func(id string, m jetstream.Msg) {
			ob := decodeObserved(id, m.Data())
			if md, err := m.Metadata(); err == nil {
				ob.pos = fmt.Sprintf("%s seq %d, stored %s", t, md.Sequence.Stream, md.Timestamp.Format("15:04:05.000"))
			}
			s.order = append(s.order, ob)
		})
		s.dups += dups
		if err != nil {
			return s, err
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
