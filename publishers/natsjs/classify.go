package natsjs

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/publish"
)

// JetStream's error codes (nats-server's errors.json) of the answers that
// refuse a message for what it is: its size, or an expectation its headers
// state that the stream does not meet. NATS publishes each message alone, so
// a refusal is always the message's own.
const (
	codeMessageTooLarge   = 10054 // JSStreamMessageExceedsMaximumErr: larger than the stream's max_msg_size
	codeStreamNotMatch    = 10060 // JSStreamNotMatchErr: Nats-Expected-Stream
	codeWrongLastMsgID    = 10070 // JSStreamWrongLastMsgIDErr: Nats-Expected-Last-Msg-Id
	codeWrongLastSequence = 10071 // JSStreamWrongLastSequenceErr: Nats-Expected-Last-(Subject-)Sequence
)

// codeSubjectOverlap is JetStream's answer to a stream created with subjects
// another stream captures (JSStreamSubjectOverlapErr): AutoProvision then
// publishes to that stream.
const codeSubjectOverlap = 10065

// classify decides what a message's failed publish is, by the one rule of
// the package documentation ("Whose fault a failure is"): the message's own
// refusal (the error returned wraps publish.ErrRejected: a strike at once), or
// the server's condition (a plain error: retried, it kills nothing). Every
// publish path calls it; nil stays nil.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if own(err) {
		return fmt.Errorf("%w: %w", publish.ErrRejected, err)
	}
	return err
}

// own reports whether err refuses the message for itself.
func own(err error) bool {
	switch {
	case errors.Is(err, ErrBadHeader), // never sent: its metadata cannot be headers
		errors.Is(err, nats.ErrMaxPayload), // larger than the server's max_payload
		errors.Is(err, nats.ErrBadSubject): // a topic that cannot be a subject
		return true
	case errors.Is(err, nats.ErrPermissionViolation):
		// The account's permissions refuse the subject for every message
		// alike: an operator's fix publishes them all.
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case codeMessageTooLarge, codeStreamNotMatch, codeWrongLastMsgID, codeWrongLastSequence:
			return true
		}
		// Any other answer is the stream's or the server's condition: full
		// (10077, JSStreamStoreFailedF, 503: "maximum messages exceeded",
		// "maximum bytes exceeded", ...; 10023 insufficient resources; 10002
		// account limits; 10047 storage), no leader, JetStream unavailable.
		// A code this list does not know is never a refusal: an outage
		// kills nothing, a refusal taken for one is only retried.
	}
	return false
}
