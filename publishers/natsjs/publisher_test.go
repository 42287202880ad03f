package natsjs_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/publishers/natsjs"
	"github.com/heraldgo/herald/relay"
)

// A bad configuration fails at New, before any connection.
func TestNewRefusesBadConfig(t *testing.T) {
	nc := &nats.Conn{}
	for name, cfg := range map[string]natsjs.Config{
		"no URL nor Conn":      {},
		"URL and Conn":         {URL: natsURL(), Conn: nc},
		"negative MaxInFlight": {URL: natsURL(), MaxInFlight: -1},
		"negative AckTimeout":  {URL: natsURL(), AckTimeout: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			if err := cfg.Validate(); err == nil {
				t.Fatal("Validate accepted it")
			}
			if p, err := natsjs.New(cfg); err == nil {
				_ = p.Close()
				t.Fatal("New accepted it")
			}
		})
	}
	if err := (natsjs.Config{URL: natsURL()}).Validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
}

// The headers are NATSMarshaler's, plus the UUID as Nats-Msg-Id; metadata
// that cannot be a header fails that message.
func TestNATSMessageIsNATSMarshalers(t *testing.T) {
	if natsjs.WatermillUUIDHeader != wmnats.WatermillUUIDHdr {
		t.Fatalf("UUID header %q, watermill-nats writes %q", natsjs.WatermillUUIDHeader, wmnats.WatermillUUIDHdr)
	}
	m := newMessages(1)[0]
	m.Metadata.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	want, err := (&wmnats.NATSMarshaler{}).Marshal("subject", m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := natsjs.NATSMessage("subject", m)
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Get(nats.MsgIdHdr) != m.UUID {
		t.Fatalf("Nats-Msg-Id %q, want %q", got.Header.Get(nats.MsgIdHdr), m.UUID)
	}
	got.Header.Del(nats.MsgIdHdr)
	if got.Subject != want.Subject || string(got.Data) != string(want.Data) || !maps.EqualFunc(got.Header, want.Header, func(a, b []string) bool {
		return strings.Join(a, "\x00") == strings.Join(b, "\x00")
	}) {
		t.Fatalf("got %v %q %v, NATSMarshaler writes %v %q %v", got.Subject, got.Data, got.Header, want.Subject, want.Data, want.Header)
	}
	back, err := (&wmnats.NATSMarshaler{}).Unmarshal(got)
	if err != nil || back.UUID != m.UUID || !maps.Equal(back.Metadata, m.Metadata) {
		t.Fatalf("NATSMarshaler reads back %v %v (%v)", back.UUID, back.Metadata, err)
	}
	for _, k := range []string{"", "a b", "a:b", "a\nb"} {
		bad := newMessages(1)[0]
		bad.Metadata.Set(k, "v")
		if _, err := natsjs.NATSMessage("subject", bad); !errors.Is(err, natsjs.ErrBadHeader) {
			t.Fatalf("key %q: %v, want ErrBadHeader", k, err)
		}
	}
	bad := newMessages(1)[0]
	bad.Metadata.Set("k", "v\r\nInjected: 1")
	if _, err := natsjs.NATSMessage("subject", bad); !errors.Is(err, natsjs.ErrBadHeader) {
		t.Fatalf("value with a line break: %v, want ErrBadHeader", err)
	}
}

// PublishBatch returns nil for each message JetStream stored and an error
// for exactly the messages it cannot store, injected in the middle of the
// window: a payload above the server's max_payload (refused by the client),
// a message its stream refuses (a wrong Nats-Expected-Stream, refused by the
// server after the messages behind it were sent), metadata that cannot be a
// header. A window smaller than the call (MaxInFlight 16) and one larger.
func TestPublishBatchFailsExactlyTheBadMessages(t *testing.T) {
	for _, window := range []int{16, 1024} {
		t.Run(map[int]string{16: "window16", 1024: "window1024"}[window], func(t *testing.T) {
			t.Parallel()
			topic := newTopic(t, "results")
			nc, j := js(t)
			p := newPublisher(t, natsjs.Config{AutoProvision: true, MaxInFlight: window})
			msgs := newMessages(300)
			tooLarge, refused, badHeader := 40, 150, 151
			msgs[tooLarge].Payload = make([]byte, nc.MaxPayload()+1)
			msgs[refused].Metadata.Set(jetstream.ExpectedStreamHeader, "herald_no_such_stream")
			msgs[badHeader].Metadata.Set("bad key", "v")
			errs := p.PublishBatch(context.Background(), topic, msgs...)
			if len(errs) != len(msgs) {
				t.Fatalf("%d results for %d messages", len(errs), len(msgs))
			}
			for i, err := range errs {
				bad := i == tooLarge || i == refused || i == badHeader
				if bad != (err != nil) {
					t.Fatalf("message %d: error %v", i, err)
				}
			}
			if !errors.Is(errs[tooLarge], nats.ErrMaxPayload) || !errors.Is(errs[badHeader], natsjs.ErrBadHeader) {
				t.Fatalf("errors %v / %v", errs[tooLarge], errs[badHeader])
			}
			var apiErr *jetstream.APIError
			if !errors.As(errs[refused], &apiErr) || !strings.Contains(errs[refused].Error(), msgs[refused].UUID) {
				t.Fatalf("refused message: %v, want the server's API error naming it", errs[refused])
			}
			// Each is the message's own failure: the broker answered (a
			// strike at once for the relay).
			for _, i := range []int{tooLarge, refused, badHeader} {
				if !errors.Is(errs[i], relay.ErrRejected) {
					t.Fatalf("message %d: %v does not wrap relay.ErrRejected", i, errs[i])
				}
			}
			if n := streamMsgs(t, j, topic); n != uint64(len(msgs)-3) {
				t.Fatalf("stream holds %d messages, want %d", n, len(msgs)-3)
			}
			// Publish reports the same failures, joined.
			if err := p.Publish(topic, msgs[refused]); err == nil {
				t.Fatal("Publish of a refused message returned nil")
			}
		})
	}
}

// A topic no stream captures (AutoProvision off): every message fails, with
// no responders.
func TestPublishBatchNoStream(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, "nostream")
	p := newPublisher(t, natsjs.Config{})
	for i, err := range p.PublishBatch(context.Background(), topic, newMessages(3)...) {
		if !errors.Is(err, jetstream.ErrNoStreamResponse) {
			t.Fatalf("message %d: %v, want ErrNoStreamResponse", i, err)
		}
	}
}

// A watermill-nats subscriber with NATSMarshaler gets the UUID, payload and
// metadata unchanged, exactly as from watermill-nats' own publisher.
func TestWatermillSubscriberReadsUUIDAndMetadata(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, "wmsub")
	p := newPublisher(t, natsjs.Config{AutoProvision: true})
	got := subscribe(t, topic)
	ours, theirs := newMessages(5), newMessages(5)
	for i := range ours {
		ours[i].Metadata.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		theirs[i].Metadata = maps.Clone(ours[i].Metadata)
	}
	for i, err := range p.PublishBatch(context.Background(), topic, ours...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := watermillPublisher(t).Publish(topic, theirs...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "10 messages", func() bool { return got.Distinct() == 10 })
	sent := map[string]*message.Message{}
	for _, m := range append(ours, theirs...) {
		sent[m.UUID] = m
	}
	for _, m := range got.Snapshot() {
		want := sent[m.UUID]
		if want == nil {
			t.Fatalf("unknown UUID %q", m.UUID)
		}
		if string(m.Payload) != string(want.Payload) || !maps.Equal(m.Metadata, want.Metadata) {
			t.Fatalf("message %s: got %q %v, sent %q %v", m.UUID, m.Payload, m.Metadata, want.Payload, want.Metadata)
		}
	}
}

// The same message published twice within the duplicate window is stored
// once; both publishes are acknowledged.
func TestDuplicateWindowDropsTheCopy(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, "dup")
	_, j := js(t)
	p := newPublisher(t, natsjs.Config{AutoProvision: true})
	msgs := newMessages(10)
	for range 2 {
		for i, err := range p.PublishBatch(context.Background(), topic, msgs...) {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	// A copy (message.Copy, as the relay republishes) in the same call too.
	if err := p.Publish(topic, msgs[3].Copy(), msgs[3].Copy()); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, j, topic); n != uint64(len(msgs)) {
		t.Fatalf("stream holds %d messages, want %d", n, len(msgs))
	}
}

// A call whose context ends before the acks came fails the messages not
// acknowledged, and sends none after: the window's slots come back (a later
// call succeeds through a window of 1).
func TestPublishBatchContextDone(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, "ctx")
	p := newPublisher(t, natsjs.Config{AutoProvision: true, MaxInFlight: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range p.PublishBatch(ctx, topic, newMessages(5)...) {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("message %d: %v, want context.Canceled", i, err)
		}
	}
	for i, err := range p.PublishBatch(context.Background(), topic, newMessages(50)...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// An existing connection is used and left open; a closed Publisher refuses.
func TestConnAndClose(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, "conn")
	nc, _ := js(t)
	p, err := natsjs.New(natsjs.Config{Conn: nc, AutoProvision: true, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(topic, newMessages(3)...); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if nc.IsClosed() {
		t.Fatal("Close closed the connection it was given")
	}
	if err := p.Publish(topic, newMessages(1)...); !errors.Is(err, natsjs.ErrClosed) {
		t.Fatalf("Publish after Close: %v, want ErrClosed", err)
	}
}

// A message nobody acknowledges (a plain NATS subscriber, no stream, holds
// its subject) fails with an ack timeout after AckTimeout; its slot comes
// back: a window of 2 publishes on afterwards.
func TestPublishBatchAckTimeout(t *testing.T) {
	t.Parallel()
	silent, stored := newTopic(t, "silent"), newTopic(t, "stored")
	nc, _ := js(t)
	sub, err := nc.Subscribe(silent, func(*nats.Msg) {}) // receives, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	testkit.Must(t, nc.Flush())
	p := newPublisher(t, natsjs.Config{MaxInFlight: 2, AckTimeout: 200 * time.Millisecond})
	start := time.Now()
	for i, err := range p.PublishBatch(context.Background(), silent, newMessages(4)...) {
		if !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			t.Fatalf("message %d: %v, want ErrAsyncPublishTimeout", i, err)
		}
	}
	if took := time.Since(start); took < 400*time.Millisecond || took > 5*time.Second {
		t.Fatalf("4 messages through a window of 2 timed out in %v, want about 2 x 200ms", took)
	}
	_, j := js(t)
	if _, err := j.CreateStream(context.Background(), natsjs.DefaultStreamConfig(stored)); err != nil {
		t.Fatal(err)
	}
	for i, err := range p.PublishBatch(context.Background(), stored, newMessages(20)...) {
		if err != nil {
			t.Fatalf("after the timeouts, message %d: %v", i, err)
		}
	}
}

// A call whose context ends while its acks are awaited fails those messages
// with the context's error (and sends no more); the slots they hold come
// back once their acks arrive, so the window does not shrink.
func TestPublishBatchDeadlineMidCall(t *testing.T) {
	t.Parallel()
	silent, stored := newTopic(t, "late"), newTopic(t, "after")
	nc, _ := js(t)
	sub, err := nc.Subscribe(silent, func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	testkit.Must(t, nc.Flush())
	p := newPublisher(t, natsjs.Config{AutoProvision: true, MaxInFlight: 4, AckTimeout: 300 * time.Millisecond,
		StreamConfig: func(topic string) jetstream.StreamConfig {
			if topic == silent {
				return jetstream.StreamConfig{Name: silent + "_unused", Subjects: []string{silent + "_unused"}}
			}
			return natsjs.DefaultStreamConfig(topic)
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	defer deleteStreams(silent + "_unused")
	for i, err := range p.PublishBatch(ctx, silent, newMessages(10)...) {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("message %d: %v, want DeadlineExceeded", i, err)
		}
	}
	// The 4 slots free once the late acks time out (300ms): 40 messages
	// through a window of 4 then succeed.
	for i, err := range p.PublishBatch(context.Background(), stored, newMessages(40)...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// A provisioned stream deleted behind the Publisher's back: the next call
// fails (no stream answers), the one after provisions it again.
func TestReprovisionAfterStreamDeleted(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, "reprovision")
	_, j := js(t)
	p := newPublisher(t, natsjs.Config{AutoProvision: true})
	if err := p.Publish(topic, newMessages(2)...); err != nil {
		t.Fatal(err)
	}
	if err := j.DeleteStream(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(topic, newMessages(2)...); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("publish to the deleted stream: %v, want ErrNoStreamResponse", err)
	}
	if err := p.Publish(topic, newMessages(3)...); err != nil {
		t.Fatalf("publish after the failure: %v", err)
	}
	if n := streamMsgs(t, j, topic); n != 3 {
		t.Fatalf("stream holds %d messages, want 3", n)
	}
}
