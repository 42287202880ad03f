package aggregate_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

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

// Cancels and moves are recorded in order, apart from the events; an empty
// key or a nil id records nothing; nothing is reported before a commit.
func TestRecordReschedules(t *testing.T) {
	var a Account
	id := uuid.New()
	a.Schedule(Paid{1}, events.After(time.Hour).Keyed("k"))
	a.CancelKey("k")
	a.Cancel(id)
	a.MoveKey("m", events.After(time.Minute))
	a.Move(id, events.Schedule{})
	a.CancelKey("")
	a.Cancel(uuid.Nil)
	if len(a.Events()) != 1 || len(a.Records()) != 1 {
		t.Fatalf("events = %v", a.Events())
	}
	want := []aggregate.Reschedule{
		{Key: "k", Cancel: true},
		{ID: id, Cancel: true},
		{Key: "m", To: events.After(time.Minute)},
		{ID: id},
	}
	got := a.Reschedules()
	if len(got) != len(want) {
		t.Fatalf("Reschedules() = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Reschedules()[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if a.Rescheduled() != nil {
		t.Fatal("outcomes before any save")
	}
	if !(aggregate.Rescheduled{}).Unknown() || (aggregate.Rescheduled{Due: 1}).Unknown() {
		t.Fatal("Unknown")
	}
}
