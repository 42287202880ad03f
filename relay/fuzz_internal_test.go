package relay

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/store"
)

// FuzzToMessage feeds arbitrary stored rows (id, metadata, payload) to the
// relay's decoding: a row either becomes a message whose UUID is its id, or
// fails with ErrUndecodable (it goes dead at once); never a panic.
func FuzzToMessage(f *testing.F) {
	f.Add("0193a5d2-7c1e-7b1a-9a0e-4f1c2d3e4f50", []byte(`{"correlation_id":"c"}`), []byte(`{"a":1}`))
	f.Add("not-a-uuid", []byte(`{}`), []byte(`{}`))
	f.Add("0193a5d2-7c1e-7b1a-9a0e-4f1c2d3e4f50", []byte(`{"n":[1,2]}`), []byte(``))
	f.Add("0193a5d2-7c1e-7b1a-9a0e-4f1c2d3e4f50", []byte(`null`), []byte(`null`))
	f.Fuzz(func(t *testing.T, id string, metadata, payload []byte) {
		r := toRows([]store.Row{{ID: id, Type: "t", Version: 1, Metadata: metadata, Payload: payload, OccurredAt: time.Unix(0, 0)}}, "")[0]
		msg, err := r.msg, r.err
		if err != nil {
			if !errors.Is(err, ErrUndecodable) {
				t.Fatalf("error does not wrap ErrUndecodable: %v", err)
			}
			return
		}
		env, err := events.ParseEnvelope(msg.UUID, msg.Metadata, msg.Payload)
		if err != nil || env.ID.String() != msg.UUID {
			t.Fatalf("message does not read back: %+v, %v", env, err)
		}
	})
}

// FuzzLastError feeds arbitrary publisher error texts to lastError: what is
// stored is valid UTF-8 without NUL bytes, at most 2,000 bytes and "...",
// on every database.
func FuzzLastError(f *testing.F) {
	f.Add("broken \x00 pipe \xff\xfe")
	f.Add(strings.Repeat("é", 1500))
	f.Fuzz(func(t *testing.T, msg string) {
		got := lastError(errors.New(msg))
		if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || len(got) > 2003 {
			t.Fatalf("lastError(%q) = %q", msg, got)
		}
	})
}
