package outbound

import (
	"sync"
	"time"
)

// Evidence is what publish calls showed about the publisher: the start of the
// latest call that acknowledged a message, by this process's monotonic clock.
// A failed call is confirmed, its messages' own failure and not the broker's,
// when a call that started at or after it returned acknowledged a message:
// the publisher worked after the failure. Only this process's calls count: no
// other clock is compared. The zero value has seen none. Safe for concurrent
// use.
type Evidence struct {
	mu     sync.Mutex
	lastOK time.Time
}

// Add records r: a call that acknowledged a message.
func (e *Evidence) Add(r Result) {
	if !r.Acked() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.Start.After(e.lastOK) {
		e.lastOK = r.Start
	}
}

// SucceededSince reports whether a call that began at t or later
// acknowledged a message: it confirms a failure that returned at t.
func (e *Evidence) SucceededSince(t time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.lastOK.IsZero() && !e.lastOK.Before(t)
}
