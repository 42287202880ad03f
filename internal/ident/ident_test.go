package ident_test

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/ident"
)

func TestParseTable(t *testing.T) {
	for in, want := range map[string]string{
		"outbox_messages":    `"outbox_messages"`,
		"app.Outbox":         `"app"."Outbox"`,
		"MySchema.MyTable_2": `"MySchema"."MyTable_2"`,
	} {
		tb, err := ident.ParseTable(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if tb.Quoted() != want || tb.String() != in {
			t.Fatalf("%s: quoted %s, string %s", in, tb.Quoted(), tb.String())
		}
	}
	if d := ident.MustTable("App.Outbox").Derived("_leases"); d.Quoted() != `"App"."Outbox_leases"` {
		t.Fatalf("derived = %s", d.Quoted())
	}
	for _, bad := range []string{"", "a.b.c", `x"; DROP TABLE y; --`, "1abc", "a-b", "a.", ".a", strings.Repeat("x", 50)} {
		if _, err := ident.ParseTable(bad); err == nil {
			t.Errorf("ParseTable(%q) accepted", bad)
		}
	}
	if _, err := ident.ParseName(strings.Repeat("x", 64)); err == nil {
		t.Error("64-byte name accepted")
	}
}

// The longest partitioned table name leaves room for its partitions' names,
// and one byte more does not: PostgreSQL would truncate the names, and the
// partitions of neighbouring ranges (sub-hour intervals) would collide.
func TestPartitionNamesFit(t *testing.T) {
	longest := ident.MustTable("app." + strings.Repeat("t", ident.MaxPartitionedLen))
	if err := longest.CheckPartitioned(); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2024, 12, 31, 23, 59, 59, 0, time.FixedZone("x", 3600))
	p := longest.Partition(start)
	if len(p.Name) != ident.MaxLen || p.Schema != "app" || !strings.HasSuffix(string(p.Name), "_p20241231t225959") {
		t.Fatalf("partition %s (%d bytes)", p, len(p.Name))
	}
	if _, err := ident.ParseName(string(p.Name)); err != nil {
		t.Fatal(err)
	}
	over := ident.MustTable(strings.Repeat("t", ident.MaxPartitionedLen+1)) // a plain table may be longer
	if err := over.CheckPartitioned(); err == nil {
		t.Fatalf("%d-byte partitioned table accepted", len(over.Name))
	}
}
