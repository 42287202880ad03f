package events

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
)

// ErrUnknownType is returned when decoding an event whose type is not registered.
var ErrUnknownType = errors.New("unknown event type")

// ErrDecode wraps the codec's error for a payload that cannot be decoded into
// its registered type. Like ErrUnknownType it is permanent: redelivering the
// message will not help, so a consumer should divert it (Watermill's PoisonQueue
// middleware) rather than nack it forever.
var ErrDecode = errors.New("cannot decode event payload")

// ErrDuplicateType is returned when registering a type name already registered
// for another Go type.
var ErrDuplicateType = errors.New("event type registered twice")

// Registry maps event type names to Go types so consumers can decode payloads back
// into the events that were recorded. The zero value is ready to use, with the
// [JSON] codec. Register types at start-up; Decode is safe for concurrent use.
type Registry struct {
	// Codec decodes payloads. Defaults to [JSON].
	Codec Codec

	mu    sync.RWMutex
	types map[string]reflect.Type
}

// Register adds the Go type of each sample under its EventType name. A sample
// given as a value (OrderPaid{}) decodes to a value, one given as a pointer
// (&OrderPaid{}) decodes to a pointer. Registering the same name again for the
// same Go type is a no-op; for another Go type it fails with [ErrDuplicateType].
func (r *Registry) Register(samples ...Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.types == nil {
		r.types = map[string]reflect.Type{}
	}
	for _, s := range samples {
		name, err := TypeOf(s)
		if err != nil {
			return fmt.Errorf("register %T: %w", s, err)
		}
		t := reflect.TypeOf(s)
		if prev, ok := r.types[name]; ok && prev != t {
			return fmt.Errorf("register %T as %q (already %v): %w", s, name, prev, ErrDuplicateType)
		}
		r.types[name] = t
	}
	return nil
}

// MustRegister is Register that panics on error, for package-level set-up.
func (r *Registry) MustRegister(samples ...Event) {
	if err := r.Register(samples...); err != nil {
		panic(err)
	}
}

// Decode decodes env's payload into a new value of the Go type registered for
// env.Type. It fails with [ErrUnknownType] for an unregistered type.
func (r *Registry) Decode(env Envelope) (Event, error) {
	r.mu.RLock()
	t, ok := r.types[env.Type]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("decode %s: %w: %q", env.ID, ErrUnknownType, env.Type)
	}
	codec := r.Codec
	if codec == nil {
		codec = JSON{}
	}
	isPtr := t.Kind() == reflect.Pointer
	if isPtr {
		t = t.Elem()
	}
	v := reflect.New(t)
	if err := codec.Unmarshal(env.Payload, v.Interface()); err != nil {
		return nil, fmt.Errorf("%w %s (%s): %w", ErrDecode, env.ID, env.Type, err)
	}
	if isPtr {
		return v.Interface().(Event), nil
	}
	return v.Elem().Interface().(Event), nil
}
