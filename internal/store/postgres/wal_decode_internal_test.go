package postgres

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/internal/store"
)

// fastRow reads what EncodeMessage writes as MessageRow does, and leaves
// anything else to it: the WAL relay's Decode gives MessageRow's row either
// way.
func TestFastRow(t *testing.T) {
	at := time.Date(2026, 12, 2, 15, 4, 5, 123456789, time.UTC)
	base := store.Row{ID: uuid.NewString(), Type: "order.placed", Version: 3, AggregateType: "Order",
		AggregateID: "o-1", Topic: "orders", Payload: []byte(`{"id":"o-1","lines":[{"n":1,"s":"a,b}"}],"x":null}`),
		Metadata: []byte(`{"traceparent":"00-abc-def-01","tenant":"t1"}`), OccurredAt: at}
	rows := map[string]func(r *store.Row){
		"full":              func(*store.Row) {},
		"no aggregate":      func(r *store.Row) { r.AggregateType, r.AggregateID = "", "" },
		"no metadata":       func(r *store.Row) { r.Metadata = []byte("{}") },
		"scalar payload":    func(r *store.Row) { r.Payload = []byte(`42`) },
		"string payload":    func(r *store.Row) { r.Payload = []byte(`"a \"quoted\" } ]"`) },
		"array payload":     func(r *store.Row) { r.Payload = []byte(`[1,{"a":[2,3]},"]"]`) },
		"negative version":  func(r *store.Row) { r.Version = -1 },
		"zero version":      func(r *store.Row) { r.Version = 0 },
		"big version":       func(r *store.Row) { r.Version = 1234567890123 },
		"unicode":           func(r *store.Row) { r.Type, r.AggregateID = "größe", "ключ-✓" },
		"escaped":           func(r *store.Row) { r.AggregateID = `a"b\c<d>&` },
		"whole second":      func(r *store.Row) { r.OccurredAt = at.Truncate(time.Second) },
		"metadata escapes":  func(r *store.Row) { r.Metadata = []byte(`{"k":"v \"q\" \u00e9"}`) },
		"payload spaces":    func(r *store.Row) { r.Payload = []byte(`{ "a" : [ 1 , 2 ] }`) },
		"control character": func(r *store.Row) { r.Topic = "a\tb" },
	}
	for name, change := range rows {
		t.Run(name, func(t *testing.T) {
			r := base
			change(&r)
			content, err := EncodeMessage(&r)
			if err != nil {
				t.Fatal(err)
			}
			want, err := MessageRow(content)
			if err != nil {
				t.Fatal(err)
			}
			got, err := wal{}.Decode(content)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) || !got.OccurredAt.Equal(want.OccurredAt) {
				t.Fatalf("Decode(%s)\n = %+v\nwant %+v", content, got, want)
			}
			_, fast := fastRow(content)
			t.Logf("fast path: %v", fast)
		})
	}
	// The fast path taken where it can be.
	content, _ := EncodeMessage(&base)
	if _, ok := fastRow(content); !ok {
		t.Fatalf("fastRow(%s) not taken", content)
	}
	// Anything else: not the fast path's; encoding/json decides.
	id := uuid.NewString()
	for _, bad := range []string{
		``, `{}`, `null`, `{"id":"` + id + `"}`,
		`{"id": "` + id + `","type":"t","version":1,"topic":"x","payload":{},"occurred_at":"2026-12-02T15:04:05Z"}`,
		`{"type":"t","id":"` + id + `","version":1,"topic":"x","payload":{},"occurred_at":"2026-12-02T15:04:05Z"}`,
		`{"id":"not-a-uuid","type":"t","version":1,"topic":"x","payload":{},"occurred_at":"2026-12-02T15:04:05Z"}`,
		`{"id":"` + id + `","type":"t","version":1,"topic":"x","payload":{,"occurred_at":"2026-12-02T15:04:05Z"}`,
		`{"id":"` + id + `","type":"t","version":1,"topic":"x","payload":{"a":},"occurred_at":"2026-12-02T15:04:05Z"}`,
		`{"id":"` + id + `","type":"t","version":01,"topic":"x","payload":{},"occurred_at":"2026-12-02T15:04:05Z"}`,
		`{"id":"` + id + `","type":"t","version":1,"topic":"x","payload":{},"occurred_at":"yesterday"}`,
		`{"id":"` + id + `","type":"t","version":1,"topic":"x","payload":{},"occurred_at":"2026-12-02T15:04:05Z"} `,
		`{"id":"` + id + `","type":"t","version":1,"topic":"x","payload":{},"occurred_at":"2026-12-02T15:04:05Z","more":1}`,
		`{"id":"` + id + `","type":"\xff","version":1,"topic":"x","payload":{},"occurred_at":"2026-12-02T15:04:05Z"}`,
		`{"id":"` + id + `","type":"t","version":1,"topic":"x","payload": {"a":1},"occurred_at":"2026-12-02T15:04:05Z"}`,
		`{"id":"` + id + `","type":"t","version":1,"topic":"x","payload":{"a":1} ,"occurred_at":"2026-12-02T15:04:05Z"}`,
		`{"id":"` + id + `","type":"t","version":1,"topic":"x","payload":{},"metadata": null,"occurred_at":"2026-12-02T15:04:05Z"}`,
	} {
		if r, ok := fastRow([]byte(bad)); ok {
			t.Errorf("fastRow(%q) = %+v, want it left to encoding/json", bad, r)
		}
	}
	// The metadata null, as encoding/json reads it.
	null := fmt.Sprintf(`{"id":"%s","type":"t","version":1,"topic":"x","payload":{},"metadata":null,"occurred_at":"2026-12-02T15:04:05Z"}`, id)
	want, err := MessageRow([]byte(null))
	if err != nil {
		t.Fatal(err)
	}
	got, ok := fastRow([]byte(null))
	if !ok || !reflect.DeepEqual(got, want) || !strings.Contains(string(got.Metadata), "{}") {
		t.Fatalf("fastRow(%s) = %+v %v, want %+v", null, got, ok, want)
	}
}
