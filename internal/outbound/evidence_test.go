package outbound

import (
	"testing"
	"time"
)

// A failure is confirmed when a call that started at or after it returned
// acknowledged a message; a success that started before does not confirm it,
// nor does a call that acknowledged nothing.
func TestEvidence(t *testing.T) {
	var ev Evidence
	t0 := time.Now()
	if ev.SucceededSince(t0) {
		t.Fatal("confirmed with no success")
	}
	ev.Add(Result{Errs: []error{nil}, Start: t0.Add(-time.Millisecond)})
	if ev.SucceededSince(t0) {
		t.Fatal("confirmed by a success that started before the failure returned")
	}
	ev.Add(Result{Errs: []error{errNope}, Start: t0})
	if ev.SucceededSince(t0) {
		t.Fatal("confirmed by a call that acknowledged nothing")
	}
	ev.Add(Result{Errs: []error{errNope, nil}, Start: t0})
	if !ev.SucceededSince(t0) || ev.SucceededSince(t0.Add(time.Nanosecond)) {
		t.Fatal("a success starting as the failure returned confirms it, not a later failure")
	}
}
