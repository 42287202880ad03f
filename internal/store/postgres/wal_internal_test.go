package postgres

import (
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/internal/store"
)

// A row's logical message decodes to the envelope of its columns, and back
// to the row (MessageRow); empty metadata ("{}") is none.
func TestMessageRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	for _, md := range []string{"{}", `{"traceparent":"00-abc-def-01","k":"v"}`} {
		r := store.Row{
			ID: "0190a4e2-7a1c-7000-8000-000000000001", Type: "order.paid", Version: 2, AggregateType: "Order",
			AggregateID: "42", Topic: "orders", Payload: []byte(`{"a": [1, "x"]}`), Metadata: []byte(md), OccurredAt: at,
		}
		b, err := EncodeMessage(&r)
		if err != nil {
			t.Fatal(err)
		}
		row, err := MessageRow(b)
		if err != nil {
			t.Fatal(err)
		}
		env, err := outbound.Envelope(&row)
		if err != nil {
			t.Fatal(err)
		}
		if env.ID.String() != r.ID || env.Type != r.Type || env.Version != 2 || env.AggregateType != "Order" ||
			env.AggregateID != "42" || env.Topic != "orders" || !env.OccurredAt.Equal(at) ||
			string(env.Payload) != `{"a":[1,"x"]}` {
			t.Fatalf("%s decoded to %+v", b, env)
		}
		if row.ID != r.ID || row.Type != r.Type || row.Version != 2 || row.AggregateType != "Order" || row.AggregateID != "42" ||
			row.Topic != "orders" || !row.OccurredAt.Equal(at) || string(row.Payload) != `{"a":[1,"x"]}` ||
			(md == "{}") != (string(row.Metadata) == "{}") {
			t.Fatalf("%s read as the row %+v", b, row)
		}
		if md == "{}" && env.Metadata != nil || md != "{}" && (env.Metadata["k"] != "v" || env.Metadata["traceparent"] != "00-abc-def-01") {
			t.Fatalf("metadata %s decoded to %v", md, env.Metadata)
		}
	}
	if _, err := MessageRow([]byte(`{"id":"nope"}`)); err == nil {
		t.Fatal("a bad id read as a row")
	}
}
