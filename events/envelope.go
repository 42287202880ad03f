package events

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Envelope is an event as stored in the outbox and carried in a message: the
// identity and routing of the event around its encoded payload.
type Envelope struct {
	// ID is the event id, a UUIDv7 taken when the event was recorded. It is the
	// Watermill message UUID and the key consumers deduplicate by.
	ID uuid.UUID
	// Type is the event type name, for example "order.paid".
	Type string
	// Version is the payload schema version; 1 unless the event is [Versioned].
	Version int
	// AggregateType and AggregateID name the aggregate that raised the event; both
	// are empty for events that belong to no aggregate.
	AggregateType string
	AggregateID   string
	// Topic is where the relay publishes the event.
	Topic string
	// OccurredAt is when the event was recorded, in UTC.
	OccurredAt time.Time
	// Payload is the event encoded by a [Codec] (JSON).
	Payload []byte
	// Metadata is the event's free-form metadata.
	Metadata Metadata
}

// Metadata keys Herald sets on every Watermill message it builds.
const (
	// MetaID repeats the event id (also the message UUID).
	MetaID = "herald_id"
	// MetaType is the event type name.
	MetaType = "herald_type"
	// MetaVersion is the payload schema version, in decimal.
	MetaVersion = "herald_version"
	// MetaAggregateType is the type of the aggregate that raised the event.
	MetaAggregateType = "herald_aggregate_type"
	// MetaAggregateID is the id of the aggregate that raised the event.
	MetaAggregateID = "herald_aggregate_id"
	// MetaOccurredAt is when the event was recorded, in RFC 3339 with nanoseconds.
	MetaOccurredAt = "herald_occurred_at"
	// MetaPrefix starts every metadata key reserved for Herald.
	MetaPrefix = "herald_"
)

// ErrMalformedMessage is returned by [ParseEnvelope] for a message that does
// not carry a valid Herald envelope.
var ErrMalformedMessage = errors.New("malformed herald message")

// MessageMetadata returns the metadata of the message that carries env: the
// event's own metadata plus the Herald keys (MetaID, MetaType, ...), which win
// over user keys of the same name. The message's UUID is env.ID and its
// payload env.Payload (the relay builds Watermill messages so).
func (env Envelope) MessageMetadata() Metadata {
	md := make(Metadata, len(env.Metadata)+6)
	for k, v := range env.Metadata {
		md[k] = v
	}
	md[MetaID] = env.ID.String()
	md[MetaType] = env.Type
	md[MetaVersion] = strconv.Itoa(env.Version)
	if env.AggregateType != "" || env.AggregateID != "" {
		md[MetaAggregateType] = env.AggregateType
		md[MetaAggregateID] = env.AggregateID
	}
	md[MetaOccurredAt] = env.OccurredAt.UTC().Format(time.RFC3339Nano)
	return md
}

// EventID returns the event id a message carries: its MetaID metadata, or
// else its UUID. It returns an error wrapping [ErrMalformedMessage] when
// neither is a valid UUID.
func EventID(msgUUID string, md map[string]string) (uuid.UUID, error) {
	raw := md[MetaID]
	if raw == "" {
		raw = msgUUID
	}
	if raw == "" {
		return uuid.Nil, fmt.Errorf("%w: no event id (neither %s nor message UUID)", ErrMalformedMessage, MetaID)
	}
	id, err := uuid.Parse(raw)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%w: event id %q: %w", ErrMalformedMessage, raw, err)
	}
	return id, nil
}

// ParseEnvelope reads the envelope a message carries, from its UUID, metadata
// and payload (a message built with MessageMetadata). The topic is not part of
// a message and is left empty. Errors wrap [ErrMalformedMessage].
func ParseEnvelope(msgUUID string, md map[string]string, payload []byte) (Envelope, error) {
	id, err := EventID(msgUUID, md)
	if err != nil {
		return Envelope{}, err
	}
	env := Envelope{
		ID:            id,
		Type:          md[MetaType],
		Version:       1,
		AggregateType: md[MetaAggregateType],
		AggregateID:   md[MetaAggregateID],
		Payload:       payload,
	}
	if env.Type == "" {
		return Envelope{}, fmt.Errorf("%w: message %s has no %s", ErrMalformedMessage, id, MetaType)
	}
	if v := md[MetaVersion]; v != "" {
		if env.Version, err = strconv.Atoi(v); err != nil || env.Version < 1 {
			return Envelope{}, fmt.Errorf("%w: message %s: bad %s %q", ErrMalformedMessage, id, MetaVersion, v)
		}
	}
	if v := md[MetaOccurredAt]; v != "" {
		if env.OccurredAt, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return Envelope{}, fmt.Errorf("%w: message %s: bad %s %q", ErrMalformedMessage, id, MetaOccurredAt, v)
		}
	}
	for k, v := range md {
		if !strings.HasPrefix(k, MetaPrefix) {
			if env.Metadata == nil {
				env.Metadata = Metadata{}
			}
			env.Metadata[k] = v
		}
	}
	return env, nil
}
