package ident_test

import (
	"strings"
	"testing"

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
