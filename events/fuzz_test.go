package events_test

import (
	"errors"
	"testing"

	"github.com/heraldgo/herald/events"
)

// FuzzParseEnvelope feeds arbitrary ids, metadata and payloads to the message
// decoding a consumer does: it must return an envelope or an error wrapping
// ErrMalformedMessage / ErrUnknownType / ErrDecode, and never panic.
func FuzzParseEnvelope(f *testing.F) {
	f.Add("0193a5d2-7c1e-7b1a-9a0e-4f1c2d3e4f50", "", "order.paid", "1", "2026-01-02T03:04:05Z", []byte(`{"OrderID":"x","Amount":1}`))
	f.Add("", "not-a-uuid", "", "x", "yesterday", []byte(`{`))
	f.Add("x", "0193a5d2-7c1e-7b1a-9a0e-4f1c2d3e4f50", "order.shipped", "-3", "", []byte(`null`))
	var reg events.Registry
	reg.MustRegister(OrderPaid{}, &Shipped{})
	f.Fuzz(func(t *testing.T, uuid, metaID, typ, version, occurred string, payload []byte) {
		md := map[string]string{}
		for k, v := range map[string]string{events.MetaID: metaID, events.MetaType: typ, events.MetaVersion: version, events.MetaOccurredAt: occurred} {
			if v != "" {
				md[k] = v
			}
		}
		env, err := events.ParseEnvelope(uuid, md, payload)
		if err != nil {
			if !errors.Is(err, events.ErrMalformedMessage) {
				t.Fatalf("FromMessage error does not wrap ErrMalformedMessage: %v", err)
			}
			return
		}
		if env.Type == "" || env.Version < 1 {
			t.Fatalf("accepted envelope %+v", env)
		}
		// A round trip keeps what was read.
		again, err := events.ParseEnvelope(env.ID.String(), env.MessageMetadata(), env.Payload)
		if err != nil || again.ID != env.ID || again.Type != env.Type || again.Version != env.Version {
			t.Fatalf("round trip: %+v, %v", again, err)
		}
		if _, err := reg.Decode(env); err != nil && !errors.Is(err, events.ErrUnknownType) && !errors.Is(err, events.ErrDecode) {
			t.Fatalf("Decode error is neither ErrUnknownType nor ErrDecode: %v", err)
		}
	})
}
