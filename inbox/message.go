package inbox

import (
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
)

// FromMessage reads the envelope of a message the relay published
// (relay.NewMessage): the event id, type, version, aggregate, time and
// metadata, around the encoded payload. Errors wrap events.ErrMalformedMessage.
func FromMessage(msg *message.Message) (events.Envelope, error) {
	return events.ParseEnvelope(msg.UUID, msg.Metadata, msg.Payload)
}

// MessageID returns the event id a message carries: its herald_id metadata
// (events.MetaID), else its UUID. Errors wrap events.ErrMalformedMessage.
func MessageID(msg *message.Message) (uuid.UUID, error) {
	return events.EventID(msg.UUID, msg.Metadata)
}

// Decode reads msg's envelope and decodes its payload into the Go type reg has
// registered for its event type. Errors wrap events.ErrMalformedMessage,
// events.ErrUnknownType or events.ErrDecode: all three are permanent, so a
// consumer should divert such a message (Watermill's PoisonQueue) rather than
// nack it forever.
func Decode(reg *events.Registry, msg *message.Message) (events.Event, events.Envelope, error) {
	env, err := FromMessage(msg)
	if err != nil {
		return nil, events.Envelope{}, err
	}
	e, err := reg.Decode(env)
	return e, env, err
}
