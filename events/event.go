package events

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/google/uuid"
)

// Event is a domain event. EventType names it, for example "order.paid"; the name
// is stored with the event and used to decode it, so it must stay stable.
type Event interface {
	EventType() string
}

// Versioned is implemented by events whose payload schema has a version. An event
// that does not implement it has version 1.
type Versioned interface {
	EventVersion() int
}

// ErrEmptyType is returned for an event whose EventType is empty.
var ErrEmptyType = errors.New("event type is empty")

// TypeOf returns the type name of e, or ErrEmptyType when it has none.
func TypeOf(e Event) (string, error) {
	if e == nil {
		return "", ErrEmptyType
	}
	t := e.EventType()
	if t == "" {
		return "", ErrEmptyType
	}
	return t, nil
}

// VersionOf returns the payload schema version of e: EventVersion for a [Versioned]
// event with a positive version, 1 otherwise.
func VersionOf(e Event) int {
	if v, ok := e.(Versioned); ok && v.EventVersion() > 0 {
		return v.EventVersion()
	}
	return 1
}

// Metadata keys of the W3C trace context of the request that saved an event,
// stored by the outbox hook when the save's context carries a span, and carried
// in the message's metadata, as HTTP carries them in headers.
const (
	MetaTraceParent = "traceparent"
	MetaTraceState  = "tracestate"
)

// Metadata is free-form string metadata carried with an event: correlation and
// causation ids, a traceparent, the user who acted. It travels as Watermill message
// metadata. Keys starting with "herald_" are reserved for Herald.
type Metadata map[string]string

// Merge returns a new Metadata holding m's pairs overlaid with other's. It returns
// nil when both are empty.
func (m Metadata) Merge(other Metadata) Metadata {
	if len(m) == 0 && len(other) == 0 {
		return nil
	}
	out := make(Metadata, len(m)+len(other))
	maps.Copy(out, m)
	maps.Copy(out, other)
	return out
}

// Record is an event as recorded by an aggregate, before it is stored: the event,
// its id (a UUIDv7 taken when it was recorded, so ids sort by recording time),
// the time it occurred and, for a scheduled event, its Schedule.
type Record struct {
	ID         uuid.UUID
	Event      Event
	OccurredAt time.Time
	Metadata   Metadata
	Schedule   Schedule
}

// NewRecord records e now: it takes a new UUIDv7 id and the current UTC time.
func NewRecord(e Event, md Metadata) Record {
	return Record{ID: NewID(), Event: e, OccurredAt: time.Now().UTC(), Metadata: md}
}

// NewID returns a new UUIDv7. It panics only if the system's random source fails.
func NewID() uuid.UUID {
	return uuid.Must(uuid.NewV7())
}

type metadataKey struct{}

// WithMetadata returns a context carrying md, merged over any metadata ctx already
// carries. The outbox hook attaches it to every event written by a statement run
// with that context (db.WithContext(ctx)); metadata given at record time wins.
func WithMetadata(ctx context.Context, md Metadata) context.Context {
	return context.WithValue(ctx, metadataKey{}, MetadataFromContext(ctx).Merge(md))
}

// MetadataFromContext returns the metadata attached with [WithMetadata], or nil.
func MetadataFromContext(ctx context.Context) Metadata {
	if ctx == nil {
		return nil
	}
	md, _ := ctx.Value(metadataKey{}).(Metadata)
	return md
}
