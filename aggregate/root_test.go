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

func TestRecordAndRetain(t *testing.T) {
	var a Account
	var _ aggregate.Aggregate = &a
	a.Record(Paid{1})
	a.RecordWithMetadata(Paid{2}, events.Metadata{"k": "v"})
	a.Record(Paid{3})
	evs := a.Events()
	if len(evs) != 3 || evs[1].(Paid).Amount != 2 {
		t.Fatalf("events = %v", evs)
	}
	p := a.Pending()
	if p[1].Metadata["k"] != "v" || p[0].ID == p[1].ID || p[0].ID.Version() != 7 {
		t.Fatal("records")
	}
	a.Retain(func(p *aggregate.Pending) bool { return p.Event.(Paid).Amount != 2 })
	if evs := a.Events(); len(evs) != 2 || evs[1].(Paid).Amount != 3 {
		t.Fatalf("after retain: %v", evs)
	}
	a.Retain(func(*aggregate.Pending) bool { return false })
	if a.Pending() != nil {
		t.Fatal("not empty")
	}
}
