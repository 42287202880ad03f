package outboxhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/store"
)

// MaxMetadataBytes is the largest encoded metadata (JSON) an event may carry,
// whatever Config.MaxPayloadBytes: 65,535 bytes, what MySQL's and MariaDB's
// TEXT column holds. Metadata over the smaller of the two fails the save with
// [ErrPayloadTooLarge].
const MaxMetadataBytes = 65535

// MaxFieldLength is the most characters an event's type, topic, aggregate
// type and aggregate id may have: 255, what MySQL's and MariaDB's
// VARCHAR(255) columns hold.
const MaxFieldLength = 255

// MaxMetadataKeyBytes is the longest metadata key an event may carry: 255
// bytes, the longest header name an AMQP frame can carry (a short string).
// Every broker Herald publishes to carries metadata as headers, so a key is
// also refused when it is empty or holds a control character or a colon
// (which would end a NATS header's name), and a value when it holds a
// carriage return or a line feed (which would end a NATS header): such
// metadata fails the save with [ErrEncode], before anything is written,
// instead of failing at every publish.
const MaxMetadataKeyBytes = 255

// MaxPayloadLimit is the largest Config.MaxPayloadBytes accepted: 8 MiB, so
// that an event fits on every database with its default settings: half of
// MariaDB's max_allowed_packet (16 MiB), which bounds one value of a
// statement, and well within what a PostgreSQL jsonb value holds (255 MiB in
// its binary form, which can take six times the bytes of the JSON text).
const MaxPayloadLimit = 8 << 20

// storableJSON reports why data, an encoded payload, cannot be stored alike on
// every database: it is not JSON, not UTF-8 (PostgreSQL and MySQL refuse it,
// SQLite keeps it), or it holds an escape PostgreSQL's jsonb refuses and the
// others keep: \u0000, or a surrogate escape that is not half of a pair.
// With syntaxOK (encoding/json wrote data) the syntax is not checked again.
func storableJSON(data []byte, syntaxOK bool) error {
	if !syntaxOK && !json.Valid(data) {
		return errors.New("is not JSON")
	}
	if !utf8.Valid(data) {
		return errors.New("is not valid UTF-8")
	}
	// In valid JSON a backslash starts an escape, inside a string; the
	// escaped character is skipped, so `\\u0000` is no escape of NUL.
	for i := bytes.IndexByte(data, '\\'); i >= 0; {
		if data[i+1] != 'u' {
			i += 2
		} else {
			r := hex4(data[i+2 : i+6])
			switch {
			case r == 0:
				return errors.New(`holds a NUL character (\u0000), which PostgreSQL cannot store`)
			case utf16.IsSurrogate(r):
				if r >= 0xdc00 || len(data) < i+12 || data[i+6] != '\\' || data[i+7] != 'u' ||
					utf16.DecodeRune(r, hex4(data[i+8:i+12])) == utf8.RuneError {
					return fmt.Errorf(`holds an unpaired surrogate (\u%04x), which PostgreSQL cannot store`, r)
				}
				i += 6 // the low half, checked with the high one
			}
			i += 6
		}
		j := bytes.IndexByte(data[i:], '\\')
		if j < 0 {
			break
		}
		i += j
	}
	return nil
}

// hex4 decodes the four hex digits of a \u escape that json.Valid accepted.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// storableText reports why s, a metadata key or value or a text column,
// cannot be stored as given on every database: a NUL byte (PostgreSQL
// refuses it), or invalid UTF-8 (PostgreSQL and MySQL refuse it; in metadata
// encoding/json would silently replace it).
func storableText(s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return errors.New("holds a NUL byte, which PostgreSQL cannot store")
	}
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	return nil
}

// headerKey reports why k cannot be a header name on every broker
// ([MaxMetadataKeyBytes]).
func headerKey(k string) error {
	switch {
	case k == "":
		return errors.New("is empty")
	case len(k) > MaxMetadataKeyBytes:
		return fmt.Errorf("is %d bytes, at most %d (an AMQP header name)", len(k), MaxMetadataKeyBytes)
	case strings.ContainsFunc(k, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ':' }):
		return errors.New("holds a control character or a colon, which no broker's header name carries")
	}
	return nil
}

// checkPayload checks the encoded payload of event id of type typ: JSON that
// every database stores alike ([ErrEncode]), within Config.MaxPayloadBytes
// ([ErrPayloadTooLarge]). With syntaxOK (encoding/json wrote it, which checks
// what MarshalJSON methods return) its JSON syntax is taken as valid.
func (p *Plugin) checkPayload(payload []byte, id uuid.UUID, typ string, syntaxOK bool) error {
	if len(payload) > p.cfg.MaxPayloadBytes {
		return fmt.Errorf("%w: event %s (%s) is %d bytes, limit %d",
			ErrPayloadTooLarge, id, typ, len(payload), p.cfg.MaxPayloadBytes)
	}
	if err := storableJSON(payload, syntaxOK); err != nil {
		return fmt.Errorf("%w %s (%s): payload %w", ErrEncode, id, typ, err)
	}
	return nil
}

// encodeMetadata checks the metadata md of event id of type typ and encodes
// it as the outbox stores it ("{}" when empty): every key and value stored as
// given on every database ([ErrEncode]), within the smaller of
// Config.MaxPayloadBytes and [MaxMetadataBytes] ([ErrPayloadTooLarge]).
func (p *Plugin) encodeMetadata(md events.Metadata, id uuid.UUID, typ string) ([]byte, error) {
	if len(md) == 0 {
		return []byte("{}"), nil
	}
	for k, v := range md {
		if err := storableText(k); err != nil {
			return nil, fmt.Errorf("%w %s (%s): metadata key %q %w", ErrEncode, id, typ, k, err)
		}
		if err := headerKey(k); err != nil {
			return nil, fmt.Errorf("%w %s (%s): metadata key %.40q %w", ErrEncode, id, typ, k, err)
		}
		if err := storableText(v); err != nil {
			return nil, fmt.Errorf("%w %s (%s): metadata %q %w", ErrEncode, id, typ, k, err)
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("%w %s (%s): metadata %q holds a line break, which no broker header carries", ErrEncode, id, typ, k)
		}
	}
	b, err := json.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("%w %s (%s) metadata: %w", ErrEncode, id, typ, err)
	}
	if limit := min(p.cfg.MaxPayloadBytes, MaxMetadataBytes); len(b) > limit {
		return nil, fmt.Errorf("%w: event %s (%s) metadata is %d bytes, limit %d",
			ErrPayloadTooLarge, id, typ, len(b), limit)
	}
	return b, nil
}

// checkFields checks the text columns of e (type, topic, aggregate type and
// id): each stored as given on every database, within [MaxFieldLength]
// characters ([ErrEncode]).
func checkFields(e *store.Row) error {
	for _, f := range [...]struct{ name, v string }{
		{"type", e.Type}, {"topic", e.Topic}, {"aggregate type", e.AggregateType}, {"aggregate id", e.AggregateID},
	} {
		if err := storableText(f.v); err != nil {
			return fmt.Errorf("%w %s: %s %w", ErrEncode, e.ID, f.name, err)
		}
		if n := utf8.RuneCountInString(f.v); n > MaxFieldLength {
			return fmt.Errorf("%w %s: %s is %d characters, at most %d", ErrEncode, e.ID, f.name, n, MaxFieldLength)
		}
	}
	return nil
}
