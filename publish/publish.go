// Package publish is the contract between Herald's relays (package relay, the
// outbox table's, and package walrelay, the WAL's) and the publisher that
// carries their messages to a broker: a Watermill message.Publisher, or a
// [BatchPublisher] that says per message which ones the broker took, and
// [ErrRejected], the one rule for whose fault a failed message is.
//
// It imports only Watermill's message package and the standard library, so
// a publisher (Herald's own in the publishers module, or one of yours)
// implements it without linking GORM or a database driver. Package relay
// keeps aliases of every name here.
package publish

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Errors a relay's publish can fail with; a relay records them as the event's
// last error. Package relay and walrelay name the same values.
var (
	// ErrRejected is what a publisher's error for one message wraps when the
	// broker answered and refused that message, and would refuse it alone,
	// every time (too large, against the stream's rules): the failure is the
	// message's own, a strike at once (the table relay kills the event after
	// MaxAttempts; the WAL relay parks it for the table relay). The broker's
	// condition must not wrap it: a timeout, a lost connection, a full or
	// missing destination, a permission, a refusal of a batch of several
	// messages. Those are an outage, which kills nothing however long it
	// lasts.
	ErrRejected = errors.New("relay: the broker rejected the message")
	// ErrPublishTimeout is a publish call that did not return within the
	// relay's PublishTimeout.
	ErrPublishTimeout = errors.New("relay: publish timed out")
	// ErrPublisherPanic is a publish call that panicked.
	ErrPublisherPanic = errors.New("relay: publisher panicked")
)

// BatchPublisher is a publisher that reports a result per message. When a
// relay's publisher implements it, the relay calls PublishBatch instead of
// Publish: the messages acknowledged are marked published and exactly the
// failed ones are retried, each as the retry policy decides; the relay does
// not, as it does with Publish, publish the messages of a failed call again
// one by one to find the failed ones.
//
// A failure is confirmed (a strike) by a later call of the same batch that
// acknowledged a message: a message acknowledged in the same call confirms
// nothing, since the broker may have gone away in the middle of the call. A
// publisher that sends a batch's messages in calls started together
// (unordered mode) leaves no later call: an error that wraps ErrRejected, the
// broker's own refusal of the message, is confirmed by itself, and a message
// the broker always rejects dies after MaxAttempts.
type BatchPublisher interface {
	message.Publisher
	// PublishBatch publishes msgs, all for topic, and returns one error per
	// message, in the order of msgs: nil when the broker acknowledged that
	// message. A result of another length fails every message of the call.
	// ctx is done after the relay's PublishTimeout; the relay then counts
	// every message of the call as failed, whatever the call returns later.
	// Each message also carries, in its Context, the producer span it is
	// published in.
	PublishBatch(ctx context.Context, topic string, msgs ...*message.Message) []error
}

// Confirmer is a source of successful publishes in this process, which
// confirm a relay's failures (relay.Config.Confirmer): the WAL relay is one,
// for the table relay of the events it parked.
type Confirmer interface {
	// SucceededSince reports whether a publish call that began at t or
	// later (this process's clock, monotonic) succeeded.
	SucceededSince(t time.Time) bool
}
