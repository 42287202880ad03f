package relay

import (
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/store"
	"github.com/heraldgo/herald/internal/testkit"
)

// DefaultRetryPolicy is the behaviour the relay had before the policy was a
// plug point: MinBackoff·2^(attempts-1) capped at MaxBackoff, jittered between
// half and all of it; dead at MaxAttempts strikes, never on an unconfirmed
// failure; poison dead at once. Its zero value has the Config's defaults.
func TestDefaultRetryPolicy(t *testing.T) {
	t.Parallel()
	p := DefaultRetryPolicy{MaxAttempts: 3, MinBackoff: time.Second, MaxBackoff: 10 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 60: 10 * time.Second} {
		if got := p.Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, want)
		}
		for range 100 {
			if d := p.Decide(FailedEvent{Attempts: n}).Delay; d < want/2 || d > want {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", n, d, want/2, want)
			}
		}
	}
	for _, c := range []struct {
		f    FailedEvent
		dead bool
	}{
		{FailedEvent{Attempts: 1, Strikes: 1, Confirmed: true}, false},
		{FailedEvent{Attempts: 3, Strikes: 2, Confirmed: true}, false},
		{FailedEvent{Attempts: 3, Strikes: 3, Confirmed: true}, true},
		{FailedEvent{Attempts: 9, Strikes: 5, Confirmed: true}, true},
		{FailedEvent{Attempts: 50, Strikes: 3}, false}, // unconfirmed: an outage kills nothing
		{FailedEvent{Attempts: 1, Poison: true}, true},
	} {
		if got := p.Decide(c.f).Dead; got != c.dead {
			t.Errorf("Decide(%+v).Dead = %v, want %v", c.f, got, c.dead)
		}
	}
	var zero DefaultRetryPolicy
	if zero.Backoff(1) != defaultMinBackoff || zero.Backoff(40) != defaultMaxBackoff {
		t.Errorf("zero value backoffs %v..%v", zero.Backoff(1), zero.Backoff(40))
	}
	if zero.Decide(FailedEvent{Strikes: defaultMaxAttempts - 1, Confirmed: true}).Dead ||
		!zero.Decide(FailedEvent{Strikes: defaultMaxAttempts, Confirmed: true}).Dead {
		t.Error("zero value does not die at the default MaxAttempts")
	}
	if zero.Horizon() != (Config{}).RetryHorizon() {
		t.Errorf("zero value horizon %v, Config's %v", zero.Horizon(), (Config{}).RetryHorizon())
	}
}

// A Config without a RetryPolicy uses DefaultRetryPolicy with its fields;
// with one, that one, and RetryHorizon is its Horizon when it has one.
func TestConfigRetryPolicy(t *testing.T) {
	t.Parallel()
	c := Config{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: time.Second}
	c.setDefaults()
	if got, want := c.retryPolicy(), (DefaultRetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: time.Second}); got != RetryPolicy(want) {
		t.Fatalf("retryPolicy() = %+v, want %+v", got, want)
	}
	custom := DefaultRetryPolicy{MaxAttempts: 2, MinBackoff: time.Minute, MaxBackoff: time.Hour}
	c = Config{RetryPolicy: custom}
	c.setDefaults()
	if c.retryPolicy() != RetryPolicy(custom) {
		t.Fatalf("retryPolicy() = %+v", c.retryPolicy())
	}
	if h := c.RetryHorizon(); h != time.Minute {
		t.Fatalf("RetryHorizon with a policy = %v, want its Horizon 1m", h)
	}
}

// The relay's own backoff after database faults is capped at 30s.
func TestFaultBackoff(t *testing.T) {
	t.Parallel()
	for n := 1; n < 40; n++ {
		want := min(50*time.Millisecond<<min(n-1, 20), maxFaultBackoff)
		if d := faultBackoff(50*time.Millisecond, n); d < want/2 || d > want {
			t.Fatalf("fault %d: %v outside [%v, %v]", n, d, want/2, want)
		}
	}
}

type policyFunc func(FailedEvent) RetryDecision

func (f policyFunc) Decide(e FailedEvent) RetryDecision { return f(e) }

// The relay hands its policy the counts after the failure; a policy that
// panics does not stop the relay (the default decides), and a negative delay
// is none.
func TestDecide(t *testing.T) {
	t.Parallel()
	var got FailedEvent
	cfg := Config{MaxAttempts: 2, Logger: testkit.Quiet(), RetryPolicy: policyFunc(func(e FailedEvent) RetryDecision {
		got = e
		return RetryDecision{Delay: -time.Second}
	})}
	cfg.setDefaults()
	r := &Relay{cfg: cfg, log: cfg.Logger}
	f := failure{row: &row{Row: store.Row{ID: "e", Topic: "t", Type: "ty", Attempts: 3, Strikes: 1}}, cause: ErrPublishTimeout}
	if d := r.decide(f, true); d.Dead || d.Delay != 0 {
		t.Fatalf("decide = %+v", d)
	}
	if got != (FailedEvent{ID: "e", Topic: "t", Type: "ty", Attempts: 4, Strikes: 2, Confirmed: true, Err: ErrPublishTimeout}) {
		t.Fatalf("the policy was asked %+v", got)
	}
	r.decide(f, false)
	if got.Strikes != 1 || got.Confirmed {
		t.Fatalf("unconfirmed: asked %+v", got)
	}
	r.cfg.RetryPolicy = policyFunc(func(FailedEvent) RetryDecision { panic("boom") })
	if d := r.decide(f, true); !d.Dead || d.Delay <= 0 {
		t.Fatalf("after a panic, the default (MaxAttempts 2) should kill at the 2nd strike: %+v", d)
	}
}
