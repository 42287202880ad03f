package store

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/heraldgo/herald/internal/ident"
)

func TestSeqsJSON(t *testing.T) {
	got, err := SeqsJSON([]Key{{ID: "a", Seq: 3}, {ID: "b", Seq: 1}, {ID: "c", Seq: 9007199254740993}})
	if err != nil || got != "[3,1,9007199254740993]" {
		t.Fatalf("SeqsJSON = %q, %v; want [3,1,9007199254740993]", got, err)
	}
	if got := JSONInts(nil); got != "[]" {
		t.Fatalf("JSONInts(nil) = %q, want []", got)
	}
	// A key without its seq would mark nothing: refused, naming the event.
	if _, err := SeqsJSON([]Key{{ID: "a", Seq: 3}, {ID: "b"}}); err == nil || !strings.Contains(err.Error(), "b claimed without its seq") {
		t.Fatalf("SeqsJSON without a seq: err = %v", err)
	}
}

func TestFenceJSON(t *testing.T) {
	f := &Fence{Leases: []Lease{{Partition: 3, Generation: 7}, {Partition: 0, Generation: 9007199254740993}}}
	if got := f.JSON(); got != "[[3,7],[0,9007199254740993]]" {
		t.Fatalf("Fence.JSON = %q", got)
	}
	if got := (&Fence{}).JSON(); got != "[]" {
		t.Fatalf("empty Fence.JSON = %q", got)
	}
	parts, gens := f.Parts()
	if len(parts) != 2 || parts[0] != 3 || gens[1] != 9007199254740993 {
		t.Fatalf("Fence.Parts = %v, %v", parts, gens)
	}
	if err := CheckFence(f, 1); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "1 of 2") {
		t.Fatalf("CheckFence with a lease lost: %v", err)
	}
	if err := CheckFence(f, 2); err != nil {
		t.Fatalf("CheckFence with every lease held: %v", err)
	}
}

// Every driver's relay additions include the leases' generation column, an
// ALTER TABLE the self-creation runs when the column is missing.
func TestRelayObjectsAddTheGeneration(t *testing.T) {
	fsys := fstest.MapFS{
		"0002_relay.up.sql":              {Data: []byte("CREATE TABLE IF NOT EXISTS \"outbox_messages_leases\" (partition int);\n")},
		"0002_relay.down.sql":            {Data: []byte("DROP TABLE \"outbox_messages_leases\";\n")},
		"0005_lease_generation.up.sql":   {Data: []byte("-- c\nALTER TABLE \"outbox_messages_leases\" ADD COLUMN IF NOT EXISTS generation bigint NOT NULL DEFAULT 0;\n")},
		"0005_lease_generation.down.sql": {Data: []byte("ALTER TABLE \"outbox_messages_leases\" DROP COLUMN generation;\n")},
	}
	objs, err := RelayObjects(fsys, ident.MustTable("app.events"), ident.Table.Quoted, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Fatalf("objects = %+v", objs)
	}
	add := objs[1]
	if add.Column != "generation" || add.Name.String() != "app.events_leases" || add.Kind != KindColumn ||
		add.SQL != `ALTER TABLE "app"."events_leases" ADD COLUMN IF NOT EXISTS generation bigint NOT NULL DEFAULT 0` {
		t.Fatalf("the column object = %+v", add)
	}
}
