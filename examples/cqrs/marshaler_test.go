package cqrs_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"

	"github.com/heraldgo/herald/inbox"
)

// inbox.CQRSMarshaler is a cqrs.CommandEventMarshaler, and a cqrs one fits its
// Fallback, although the inbox package does not import the cqrs component.
var (
	_ cqrs.CommandEventMarshaler = inbox.CQRSMarshaler{}
	_ inbox.Marshaler            = cqrs.JSONMarshaler{}
)

type shipOrder struct {
	OrderID string `json:"order_id"`
}

// The default Fallback names, writes and reads non-Herald values as
// cqrs.JSONMarshaler{} does, so the two interoperate.
func TestDefaultFallbackIsCQRSJSON(t *testing.T) {
	ours, theirs := inbox.CQRSMarshaler{}, cqrs.JSONMarshaler{}
	for _, v := range []any{shipOrder{"o-1"}, &shipOrder{"o-2"}} {
		if got, want := ours.Name(v), theirs.Name(v); got != want {
			t.Fatalf("Name(%T) = %q, cqrs says %q", v, got, want)
		}
		msg, err := ours.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := theirs.NameFromMessage(msg), theirs.Name(v); got != want {
			t.Fatalf("cqrs reads our message as %q, want %q", got, want)
		}
		var back shipOrder
		if err := theirs.Unmarshal(msg, &back); err != nil || back.OrderID == "" {
			t.Fatalf("cqrs cannot read our message: %v %+v", err, back)
		}
		msg, err = theirs.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ours.NameFromMessage(msg), ours.Name(v); got != want {
			t.Fatalf("we read cqrs's message as %q, want %q", got, want)
		}
		back = shipOrder{}
		if err := ours.Unmarshal(msg, &back); err != nil || back.OrderID == "" {
			t.Fatalf("we cannot read cqrs's message: %v %+v", err, back)
		}
	}
}
