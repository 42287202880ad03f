package drivertest

import (
	"context"
	"errors"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

var wakerTests = []test{
	{"DeclaredByCaps", testWakerDeclared},
	{"ListenWakesOnNotify", testWakerListenNotify},
}

// A driver without Listen says so: its Waker's methods return
// store.ErrNotSupported.
func testWakerDeclared(t tb.TB, e *env) {
	if e.drv.Caps().Has(store.Listen) {
		t.Skip("the driver has cross-process wake-ups (store.Listen)")
	}
	if err := e.drv.Waker().Notify(e.ctx, e.db, "herald_drivertest"); !errors.Is(err, store.ErrNotSupported) {
		t.Fatalf("Notify without Listen = %v, want store.ErrNotSupported", err)
	}
	if err := e.drv.Waker().Listen(e.ctx, e.db, "herald_drivertest", func(string) {}); !errors.Is(err, store.ErrNotSupported) {
		t.Fatalf("Listen without Listen = %v, want store.ErrNotSupported", err)
	}
}

// Listen calls wake once when it listens, then once per Notify on its
// channel (not on another), with its payload, until its context ends; a
// Notify with payloads sends one notification each.
func testWakerListenNotify(t tb.TB, e *env) {
	if !e.drv.Caps().Has(store.Listen) {
		t.Skip("the driver has no cross-process wake-ups (store.Listen)")
	}
	w := e.drv.Waker()
	ctx, cancel := context.WithCancel(e.ctx)
	woken := make(chan string, 16)
	ended := make(chan error, 1)
	go func() {
		ended <- w.Listen(ctx, e.db, "herald_drivertest", func(p string) { woken <- p })
	}()
	wait := func(what, want string) {
		t.Helper()
		select {
		case p := <-woken:
			if p != want {
				t.Fatalf("%s: payload %q, want %q", what, p, want)
			}
		case err := <-ended:
			t.Fatalf("Listen ended before %s: %v", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake-up: %s", what)
		}
	}
	wait("listening", "")
	must(t, w.Notify(e.ctx, e.db, "herald_drivertest_other"))
	must(t, w.Notify(e.ctx, e.db, "herald_drivertest"))
	wait("the Notify", "")
	must(t, w.Notify(e.ctx, e.db, "herald_drivertest", "tenant_a", "tenant_b"))
	got := map[string]bool{}
	for range 2 {
		select {
		case p := <-woken:
			got[p] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("the Notify with payloads: woken with %v", got)
		}
	}
	if !got["tenant_a"] || !got["tenant_b"] {
		t.Fatalf("the Notify with payloads: woken with %v, want tenant_a and tenant_b", got)
	}
	select {
	case <-woken:
		t.Fatal("woken by a Notify on another channel, or twice by one")
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-ended:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Listen ended with its context: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not end with its context")
	}
}
