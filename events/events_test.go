package events_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/events"
)

type OrderPaid struct {
	OrderID string
	Amount  int
}

func (OrderPaid) EventType() string { return "order.paid" }

type Shipped struct{ N int }

func (*Shipped) EventType() string { return "order.shipped" }
func (*Shipped) EventVersion() int { return 3 }

type Other struct{}

func (Other) EventType() string { return "order.paid" }

func TestNewRecord(t *testing.T) {
	a := events.NewRecord(OrderPaid{}, nil)
	b := events.NewRecord(OrderPaid{}, nil)
	if a.ID.Version() != 7 || b.ID.Version() != 7 {
		t.Fatal("ids are not UUIDv7")
	}
	if a.ID.String() >= b.ID.String() {
		t.Fatal("UUIDv7 ids do not sort by recording time")
	}
	if a.OccurredAt.Location() != time.UTC || time.Since(a.OccurredAt) > time.Minute {
		t.Fatalf("occurred at %v", a.OccurredAt)
	}
}

func TestTypeAndVersion(t *testing.T) {
	if _, err := events.TypeOf(nil); !errors.Is(err, events.ErrEmptyType) {
		t.Fatal("nil event has a type")
	}
	if events.VersionOf(OrderPaid{}) != 1 || events.VersionOf(&Shipped{}) != 3 {
		t.Fatal("versions")
	}
}

func TestMetadataContext(t *testing.T) {
	ctx := events.WithMetadata(context.Background(), events.Metadata{"a": "1", "b": "1"})
	ctx = events.WithMetadata(ctx, events.Metadata{"b": "2"})
	md := events.MetadataFromContext(ctx)
	if md["a"] != "1" || md["b"] != "2" {
		t.Fatalf("metadata = %v", md)
	}
	if events.MetadataFromContext(context.Background()) != nil {
		t.Fatal("metadata from an empty context")
	}
	if (events.Metadata{}).Merge(nil) != nil {
		t.Fatal("merge of empties is not nil")
	}
}

func TestMessageRoundTrip(t *testing.T) {
	env := events.Envelope{
		ID: events.NewID(), Type: "order.paid", Version: 2,
		AggregateType: "Order", AggregateID: "o-1", Topic: "orders",
		OccurredAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		Payload:    []byte(`{"OrderID":"o-1","Amount":5}`),
		Metadata:   events.Metadata{"correlation_id": "c", events.MetaType: "spoofed"},
	}
	md := env.MessageMetadata()
	if md[events.MetaID] != env.ID.String() {
		t.Fatal("the metadata does not repeat the event id")
	}
	if md[events.MetaType] != "order.paid" {
		t.Fatal("user metadata overrode a reserved key")
	}
	got, err := events.ParseEnvelope(env.ID.String(), md, env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != env.ID || got.Type != env.Type || got.Version != 2 || got.AggregateType != "Order" ||
		got.AggregateID != "o-1" || !got.OccurredAt.Equal(env.OccurredAt) || string(got.Payload) != string(env.Payload) ||
		got.Metadata["correlation_id"] != "c" || len(got.Metadata) != 1 {
		t.Fatalf("round trip: %+v", got)
	}
	// A broker that replaced the message UUID: the metadata key still carries the id.
	if id, _ := events.EventID("something-else", md); id != env.ID {
		t.Fatal("id lost when the message UUID changed")
	}
}

func TestParseEnvelopeMalformed(t *testing.T) {
	id := uuid.NewString()
	for name, c := range map[string]struct {
		uuid string
		md   map[string]string
	}{
		"no id":        {"", nil},
		"bad id":       {"not-a-uuid", nil},
		"no type":      {id, nil},
		"bad version":  {id, map[string]string{events.MetaType: "x", events.MetaVersion: "zero"}},
		"bad occurred": {id, map[string]string{events.MetaType: "x", events.MetaOccurredAt: "yesterday"}},
	} {
		if _, err := events.ParseEnvelope(c.uuid, c.md, []byte(`{}`)); !errors.Is(err, events.ErrMalformedMessage) {
			t.Errorf("%s: error = %v", name, err)
		}
	}
}

func TestRegistry(t *testing.T) {
	var reg events.Registry
	if err := reg.Register(OrderPaid{}, &Shipped{}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(OrderPaid{}); err != nil {
		t.Fatal("re-registering the same type failed")
	}
	if err := reg.Register(Other{}); !errors.Is(err, events.ErrDuplicateType) {
		t.Fatalf("duplicate type: %v", err)
	}
	e, err := reg.Decode(events.Envelope{Type: "order.paid", Payload: []byte(`{"OrderID":"x","Amount":3}`)})
	if err != nil || e.(OrderPaid).Amount != 3 {
		t.Fatalf("decode value: %v %v", e, err)
	}
	e, err = reg.Decode(events.Envelope{ID: events.NewID(), Type: "order.shipped", Version: 3, Payload: []byte(`{"N":4}`)})
	if err != nil || e.(*Shipped).N != 4 {
		t.Fatalf("decode pointer: %v %v", e, err)
	}
	if _, err := reg.Decode(events.Envelope{Type: "nope"}); !errors.Is(err, events.ErrUnknownType) {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := reg.Decode(events.Envelope{Type: "order.paid", Payload: []byte(`{`)}); !errors.Is(err, events.ErrDecode) {
		t.Fatalf("bad payload: %v", err)
	}
}
