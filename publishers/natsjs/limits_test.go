package natsjs_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/publishers/natsjs"
	"github.com/heraldgo/herald/relay"
)

// A topic that cannot be a subject to publish to is the message's refusal,
// with AutoProvision too (where the stream for it cannot be created: JetStream
// answers 10052, which alone says nothing of whose fault it is): a strike at
// once, never an outage retried for ever.
func TestInvalidSubjectRefused(t *testing.T) {
	t.Parallel()
	for _, topic := range []string{"bad topic", "herald_natsjs..x", "herald_natsjs.*", "herald_natsjs.>", ".herald_natsjs", "herald_natsjs.", "tab\ttopic", ""} {
		for _, auto := range []bool{true, false} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs := newPublisher(t, natsjs.Config{AutoProvision: auto, AckTimeout: time.Second}).PublishBatch(ctx, topic, newMessages(2)...)
			cancel()
			for i, err := range errs {
				switch {
				case err == nil:
					t.Errorf("topic %q, AutoProvision %v: message %d published, want it refused", topic, auto, i)
				case !errors.Is(err, relay.ErrRejected) || !errors.Is(err, nats.ErrBadSubject):
					t.Errorf("topic %q, AutoProvision %v: message %d: %v, want it refused (relay.ErrRejected, nats.ErrBadSubject)", topic, auto, i, err)
				}
			}
		}
	}
}

// The server's max_payload bounds a message's payload and headers together:
// MaxPayloadBytes leaves room for the most metadata the write path accepts,
// and a payload of that size, with that much metadata, is published.
func TestMaxPayloadBytesLeavesRoomForHeaders(t *testing.T) {
	t.Parallel()
	nc, _ := js(t)
	p := newPublisher(t, natsjs.Config{AutoProvision: true})
	limit := p.MaxPayloadBytes()
	if want := int(nc.MaxPayload()) - natsjs.HeaderAllowance; limit != want {
		t.Fatalf("MaxPayloadBytes %d, want max_payload %d less %d", limit, nc.MaxPayload(), natsjs.HeaderAllowance)
	}
	if nc.MaxPayload() == 1<<20 && limit < outboxhook.DefaultMaxPayloadBytes {
		t.Fatalf("with the server's default max_payload, MaxPayloadBytes %d is below the write path's default %d", limit, outboxhook.DefaultMaxPayloadBytes)
	}
	if natsjs.HeaderAllowance < outboxhook.MaxMetadataBytes {
		t.Fatalf("HeaderAllowance %d is below outboxhook.MaxMetadataBytes %d", natsjs.HeaderAllowance, outboxhook.MaxMetadataBytes)
	}
	m := newMessages(1)[0]
	m.Payload = make([]byte, limit)
	// Metadata of about MaxMetadataBytes as JSON, and the Herald keys at their longest.
	for i := range 60 {
		m.Metadata.Set("k"+strconv.Itoa(i), strings.Repeat("v", 1000))
	}
	for _, k := range []string{"herald_id", "herald_type", "herald_aggregate_type", "herald_aggregate_id", "herald_version", "herald_occurred_at", "herald_topic"} {
		m.Metadata.Set(k, strings.Repeat("t", outboxhook.MaxFieldLength))
	}
	topic := newTopic(t, "maxpayload_fit")
	for i, err := range p.PublishBatch(context.Background(), topic, m) {
		if err != nil {
			t.Fatalf("message %d: %v, want it published", i, err)
		}
	}
}

// A message over the server's max_payload is refused, with an error that
// says what to set: the write path's outboxhook.Config.MaxPayloadBytes (to
// MaxPayloadBytes) or the server's max_payload.
func TestOverMaxPayloadSaysWhatToSet(t *testing.T) {
	t.Parallel()
	nc, _ := js(t)
	p := newPublisher(t, natsjs.Config{AutoProvision: true})
	m := newMessages(1)
	m[0].Payload = make([]byte, nc.MaxPayload()) // the payload alone fits; with its headers it does not
	for i, err := range p.PublishBatch(context.Background(), newTopic(t, "maxpayload_over"), m...) {
		switch {
		case err == nil:
			t.Fatalf("message %d published, want it refused", i)
		case !errors.Is(err, relay.ErrRejected) || !errors.Is(err, nats.ErrMaxPayload):
			t.Fatalf("message %d: %v, want it refused (nats.ErrMaxPayload)", i, err)
		case !strings.Contains(err.Error(), "max_payload") || !strings.Contains(err.Error(), "outboxhook.Config.MaxPayloadBytes"):
			t.Fatalf("message %d: %v, want it to name max_payload and outboxhook.Config.MaxPayloadBytes", i, err)
		}
	}
}

// With AutoProvision, a topic that a stream of another name already captures
// (a wildcard subject) is published to that stream: the stream for the
// topic cannot be created (its subject overlaps: 10065), and needs not be.
func TestAutoProvisionTopicCapturedByAnotherStream(t *testing.T) {
	t.Parallel()
	base := newTopic(t, "captured")
	_, j := js(t)
	if _, err := j.CreateStream(context.Background(), jetstream.StreamConfig{Name: base, Subjects: []string{base + ".*"}}); err != nil {
		t.Fatalf("create stream %s: %v", base, err)
	}
	topic := base + ".orders"
	p := newPublisher(t, natsjs.Config{AutoProvision: true})
	for i, err := range p.PublishBatch(context.Background(), topic, newMessages(2)...) {
		if err != nil {
			t.Fatalf("message %d: %v, want it published to stream %s", i, err, base)
		}
	}
	if n := streamMsgs(t, j, base); n != 2 {
		t.Fatalf("stream %s holds %d messages, want 2", base, n)
	}
}
