package events

import "encoding/json"

// Codec encodes event payloads for storage and decodes them back. The outbox stores
// payloads in a jsonb column, so a Codec must produce JSON.
type Codec interface {
	// Marshal encodes an event's payload.
	Marshal(e Event) ([]byte, error)
	// Unmarshal decodes data into v, a pointer to an event value.
	Unmarshal(data []byte, v any) error
}

// JSON is the default [Codec]: encoding/json. It refuses values JSON cannot hold,
// such as channels, functions and NaN or infinite floats.
type JSON struct{}

// Marshal encodes e with json.Marshal.
func (JSON) Marshal(e Event) ([]byte, error) { return json.Marshal(e) }

// Unmarshal decodes data with json.Unmarshal.
func (JSON) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
