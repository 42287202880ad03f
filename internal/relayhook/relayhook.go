// Package relayhook lets Herald's tests stop a relay at exact points of a
// batch (to pause it there, as a GC pause or SIGSTOP would, or to learn that
// it got there), from any package of the module: the conformance suite runs
// relays through package relay's public API only. A test passes its Hook in
// the context it gives Relay.Run; without one the relay calls nothing. A
// fleet follows each of its relays' rounds the same way (Round), and keeps
// its labelled tenants' gauges between runs (Gauges).
package relayhook

import "context"

// Point is a point of a relay's batch.
type Point int

const (
	// Claimed: the batch claimed its rows (some), before its first Publish
	// call.
	Claimed Point = iota
	// Publish: right before a Publish call of the batch (before the relay
	// looks whether the batch still has time for it).
	Publish
	// Marks: the batch's Publish calls are over, before its marks.
	Marks
	// Done: the batch is over, its marks committed or not (err).
	Done
)

// Hook is called at each point of every batch that claimed rows; err is the
// batch's outcome at Done, nil elsewhere. It may block: the batch waits.
type Hook func(p Point, err error)

// key is the context key of a value of type T: one per type.
type key[T any] struct{}

// with returns ctx carrying v, the value of its type.
func with[T any](ctx context.Context, v T) context.Context {
	return context.WithValue(ctx, key[T]{}, v)
}

// from returns the value of type T ctx carries, or T's zero value.
func from[T any](ctx context.Context) T {
	v, _ := ctx.Value(key[T]{}).(T)
	return v
}

// With returns ctx carrying h, for Relay.Run.
func With(ctx context.Context, h Hook) context.Context { return with(ctx, h) }

// From returns the hook ctx carries, or nil.
func From(ctx context.Context) Hook { return from[Hook](ctx) }

// Round is told how each round of a relay's loop ended; a failed try at the
// relay's schema at start is a round that claimed none. It must not block.
type Round func(RoundInfo)

// RoundInfo is how a round ended.
type RoundInfo struct {
	Claimed int   // events claimed
	Err     error // the round's error
	// Leased is false for a round of an ordered relay that held no
	// partition lease (not taken yet, or all another instance's): it could
	// claim nothing. Always true unordered.
	Leased bool
}

// WithRound returns ctx carrying f, for Relay.Run.
func WithRound(ctx context.Context, f Round) context.Context { return with(ctx, f) }

// RoundFrom returns the Round ctx carries, or nil.
func RoundFrom(ctx context.Context) Round { return from[Round](ctx) }

// Gauges, carried by the context of Relay.Run, takes over when the relay's
// outbox gauges are observed: instead of registering them for the time Run
// runs, Run hands their registration to Keep, which may register them (call
// register) once and unregister them when it sees fit. A fleet keeps a
// labelled tenant's gauges from its first run until it lets the tenant go,
// so that an idle tenant's figures (its dead events, its scheduled ones)
// stay observed between runs.
type Gauges interface {
	Keep(register func() (unregister func()))
}

// WithGauges returns ctx carrying g, for Relay.Run.
func WithGauges(ctx context.Context, g Gauges) context.Context { return with(ctx, g) }

// GaugesFrom returns the Gauges ctx carries, or nil.
func GaugesFrom(ctx context.Context) Gauges { return from[Gauges](ctx) }
