package postgres

import (
	"bytes"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/store"
)

// The fast path of the WAL relay's decoding (wal.Decode): what
// EncodeMessage writes in the common case, read without encoding/json.

// fastRow reads content when it is exactly as encoding/json writes a
// Message: its fields in their order, no spaces, strings without escapes and
// in valid UTF-8, a valid id and time, a valid payload. For anything else ok
// is false, and the caller decodes it with encoding/json (MessageRow). For
// what EncodeMessage writes, fastRow returns what MessageRow returns, or
// nothing. The row's Payload and Metadata are b's: the caller must not
// change b while it uses the row.
func fastRow(b []byte) (r store.Row, ok bool) {
	p := parser{b: b}
	var occurred string
	ok = p.lit(`{"id":`) && p.str(&r.ID) &&
		p.lit(`,"type":`) && p.str(&r.Type) &&
		p.lit(`,"version":`) && p.int(&r.Version) &&
		(!p.has(`,"aggregate_type":`) || p.lit(`,"aggregate_type":`) && p.str(&r.AggregateType)) &&
		(!p.has(`,"aggregate_id":`) || p.lit(`,"aggregate_id":`) && p.str(&r.AggregateID)) &&
		p.lit(`,"topic":`) && p.str(&r.Topic) &&
		p.lit(`,"payload":`) && p.raw(&r.Payload) &&
		(!p.has(`,"metadata":`) || p.lit(`,"metadata":`) && p.raw(&r.Metadata)) &&
		p.lit(`,"occurred_at":`) && p.str(&occurred) &&
		p.lit(`}`) && p.i == len(b)
	if !ok || !json.Valid(r.Payload) {
		return store.Row{}, false
	}
	if _, err := uuid.Parse(r.ID); err != nil {
		return store.Row{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, occurred)
	if err != nil {
		return store.Row{}, false
	}
	r.OccurredAt = t
	if len(r.Metadata) == 0 || string(r.Metadata) == "null" {
		r.Metadata = []byte("{}")
	}
	return r, true
}

// parser reads b from i on.
type parser struct {
	b []byte
	i int
}

// has reports whether s comes next.
func (p *parser) has(s string) bool {
	return len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s
}

// lit reads s.
func (p *parser) lit(s string) bool {
	if !p.has(s) {
		return false
	}
	p.i += len(s)
	return true
}

// str reads a string with no escapes, in valid UTF-8.
func (p *parser) str(out *string) bool {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	end := bytes.IndexByte(p.b[p.i+1:], '"')
	if end < 0 {
		return false
	}
	s := p.b[p.i+1 : p.i+1+end]
	if bytes.IndexByte(s, '\\') >= 0 || !utf8.Valid(s) {
		return false
	}
	for _, c := range s {
		if c < 0x20 {
			return false
		}
	}
	*out = string(s)
	p.i += end + 2
	return true
}

// int reads an integer of at most 9 digits.
func (p *parser) int(out *int) bool {
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start, n := p.i, 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' && p.i-start < 9 {
		n = n*10 + int(p.b[p.i]-'0')
		p.i++
	}
	if p.i == start || (p.b[start] == '0' && p.i-start > 1) || (p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9') {
		return false
	}
	if neg {
		n = -n
	}
	*out = n
	return true
}

// raw reads a JSON value (an object, an array, a string or a scalar),
// without checking it: its end is where its brackets close. A value with
// white space before or after it is not taken (encoding/json drops that
// space, and would give other bytes).
func (p *parser) raw(out *[]byte) bool {
	if !p.rawValue(out) {
		return false
	}
	v := *out
	return !isSpace(v[0]) && !isSpace(v[len(v)-1])
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// rawValue reads raw's value, spaces included.
func (p *parser) rawValue(out *[]byte) bool {
	start, depth := p.i, 0
	for p.i < len(p.b) {
		switch c := p.b[p.i]; c {
		case '"':
			p.i++
			for p.i < len(p.b) && p.b[p.i] != '"' {
				if p.b[p.i] == '\\' {
					p.i++
				}
				p.i++
			}
			if p.i >= len(p.b) {
				return false
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the end of the enclosing object
				*out = p.b[start:p.i]
				return p.i > start
			}
			depth--
		case ',':
			if depth == 0 {
				*out = p.b[start:p.i]
				return p.i > start
			}
		}
		p.i++
	}
	return false
}
