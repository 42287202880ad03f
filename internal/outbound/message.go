package outbound

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/store"
)

// ErrUndecodable is a stored event whose id or metadata cannot be read: no
// retry can fix it (relay.ErrUndecodable).
var ErrUndecodable = errors.New("relay: stored event cannot be decoded")

// Envelope reads a stored event (an outbox row, or the content of a WAL
// message) as the envelope it was written from; an error wrapping
// ErrUndecodable when its id or metadata cannot be read.
func Envelope(r *store.Row) (events.Envelope, error) {
	id, err := uuid.Parse(r.ID)
	if err != nil {
		return events.Envelope{}, fmt.Errorf("%w: id %q: %w", ErrUndecodable, r.ID, err)
	}
	env := events.Envelope{
		ID: id, Type: r.Type, Version: r.Version, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
		Topic: r.Topic, OccurredAt: r.OccurredAt, Payload: r.Payload,
	}
	if len(r.Metadata) > 0 && string(r.Metadata) != "{}" {
		if err := json.Unmarshal(r.Metadata, &env.Metadata); err != nil {
			return events.Envelope{}, fmt.Errorf("%w: metadata of %s: %w", ErrUndecodable, r.ID, err)
		}
		if len(env.Metadata) == 0 {
			env.Metadata = nil
		}
	}
	return env, nil
}

// Message builds the Watermill message a relay publishes for env: its UUID is
// the event id, its payload the encoded event, and its metadata
// env.MessageMetadata() (the event's own metadata and the Herald keys, which
// win).
func Message(env events.Envelope) *message.Message {
	md := env.MessageMetadata()
	msg := message.NewMessage(md[events.MetaID], env.Payload)
	msg.Metadata = message.Metadata(md)
	return msg
}
