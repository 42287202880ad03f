package aggregate_test

import (
	"testing"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
)

type Paid struct{ Amount int }

func (Paid) EventType() string { return "paid" }

type Account struct {
	ID int
	aggregate.Root
}

func TestRecord(t *testing.T) {
	var a Account
	var _ aggregate.Aggregate = &a
	a.Record(Paid{1})
	a.RecordWithMetadata(Paid{2}, events.Metadata{"k": "v"})
	a.Record(Paid{3})
	evs := a.Events()
	if len(evs) != 3 || evs[1].(Paid).Amount != 2 {
		t.Fatalf("events = %v", evs)
	}
	p := a.Records()
	if p[1].Metadata["k"] != "v" || p[0].ID == p[1].ID || p[0].ID.Version() != 7 {
		t.Fatal("records")
	}
}

// A copy by value shares what was recorded before the copy and nothing after:
// neither writes into the other's events.
func TestCopyByValue(t *testing.T) {
	var a Account
	a.Record(Paid{1})
	b := a
	b.Record(Paid{2})
	a.Record(Paid{3})
	if got := a.Events(); len(got) != 2 || got[1].(Paid).Amount != 3 {
		t.Fatalf("original = %v", got)
	}
	if got := b.Events(); len(got) != 2 || got[1].(Paid).Amount != 2 {
		t.Fatalf("copy = %v", got)
	}
	if a.Records()[0].ID != b.Records()[0].ID {
		t.Fatal("the shared event has two ids")
	}
}
