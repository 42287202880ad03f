package inbox

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/events"
)

// CQRSMarshaler is the cqrs.CommandEventMarshaler that lets Watermill's CQRS
// component work with Herald messages: a cqrs.EventProcessor or
// cqrs.EventGroupProcessor handler receives the events the relay publishes as
// the user's own event structs, and a cqrs.EventBus publishes messages that
// Herald's consumers read (inbox.Decode, events.ParseEnvelope).
//
// An event that implements events.Event is named by its EventType (the
// herald_type metadata key); any other value, and any message without
// herald_type, is left to Fallback. Payloads are JSON (Herald's default codec).
type CQRSMarshaler struct {
	// Fallback names and reads what is not a Herald event; a
	// cqrs.CommandEventMarshaler fits. Without one, it is done as
	// cqrs.JSONMarshaler{} does: JSON payloads, named by the fully qualified
	// struct name in the "name" metadata key. Defaults to cqrs.JSONMarshaler{}'s
	// behaviour.
	Fallback Marshaler
}

// Marshaler is Watermill's cqrs.CommandEventMarshaler, spelled out so that
// the inbox package does not import the cqrs component (and, through it,
// protobuf) into every service that uses the inbox.
type Marshaler interface {
	// Marshal builds the message of v.
	Marshal(v any) (*message.Message, error)
	// Unmarshal decodes msg into v.
	Unmarshal(msg *message.Message, v any) error
	// Name returns the name v is routed by.
	Name(v any) string
	// NameFromMessage returns the name msg is routed by.
	NameFromMessage(msg *message.Message) string
}

var _ Marshaler = CQRSMarshaler{}

func (m CQRSMarshaler) fallback() Marshaler {
	if m.Fallback != nil {
		return m.Fallback
	}
	return jsonMarshaler{}
}

// jsonMarshaler behaves as cqrs.JSONMarshaler{}.
type jsonMarshaler struct{}

func (j jsonMarshaler) Marshal(v any) (*message.Message, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(watermill.NewUUID(), b)
	msg.Metadata.Set("name", j.Name(v))
	return msg, nil
}

func (jsonMarshaler) Unmarshal(msg *message.Message, v any) error {
	return json.Unmarshal(msg.Payload, v)
}

func (jsonMarshaler) Name(v any) string { return strings.TrimLeft(fmt.Sprintf("%T", v), "*") }

func (jsonMarshaler) NameFromMessage(msg *message.Message) string {
	return msg.Metadata.Get("name")
}

// Marshal builds the message of v: for a Herald event, the message the relay
// would publish for it (a new UUIDv7 as its UUID and herald_id, its type,
// version and time in the Herald metadata keys, its JSON payload); for any
// other value, Fallback's.
func (m CQRSMarshaler) Marshal(v any) (*message.Message, error) {
	e, ok := v.(events.Event)
	if !ok {
		return m.fallback().Marshal(v)
	}
	typ, err := events.TypeOf(e)
	if err != nil {
		return nil, fmt.Errorf("inbox: marshal %T: %w", v, err)
	}
	payload, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("inbox: marshal %T: %w", v, err)
	}
	env := events.Envelope{ID: events.NewID(), Type: typ, Version: events.VersionOf(e), OccurredAt: time.Now().UTC(), Payload: payload}
	msg := message.NewMessage(env.ID.String(), payload)
	for k, val := range env.MessageMetadata() {
		msg.Metadata.Set(k, val)
	}
	return msg, nil
}

// Unmarshal decodes msg's JSON payload into v.
func (m CQRSMarshaler) Unmarshal(msg *message.Message, v any) error {
	if msg.Metadata.Get(events.MetaType) == "" {
		return m.fallback().Unmarshal(msg, v)
	}
	if err := json.Unmarshal(msg.Payload, v); err != nil {
		return fmt.Errorf("%w %s: %w", events.ErrDecode, msg.UUID, err)
	}
	return nil
}

// Name returns v's event type when v is a Herald event, Fallback's name
// otherwise.
func (m CQRSMarshaler) Name(v any) string {
	if e, ok := v.(events.Event); ok {
		if typ, err := events.TypeOf(e); err == nil {
			return typ
		}
	}
	return m.fallback().Name(v)
}

// NameFromMessage returns the message's herald_type, or Fallback's name for a
// message without one.
func (m CQRSMarshaler) NameFromMessage(msg *message.Message) string {
	if t := msg.Metadata.Get(events.MetaType); t != "" {
		return t
	}
	return m.fallback().NameFromMessage(msg)
}
