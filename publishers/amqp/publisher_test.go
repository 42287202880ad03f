package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/publishers/amqp"
	"github.com/heraldgo/herald/relay"
)

func TestConfigValidate(t *testing.T) {
	for name, cfg := range map[string]amqp.Config{
		"no URL":                    {},
		"bad URL":                   {URL: "http://example.com/"},
		"negative MaxInFlight":      {URL: url(), MaxInFlight: -1},
		"negative DialTimeout":      {URL: url(), DialTimeout: -time.Second},
		"negative MaxMessageSize":   {URL: url(), MaxMessageSize: -1},
		"UUIDHeader over 255 bytes": {URL: url(), UUIDHeader: strings.Repeat("u", 256)},
	} {
		if _, err := amqp.New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	if err := (amqp.Config{URL: url()}).Validate(); err != nil {
		t.Fatalf("the defaults are invalid: %v", err)
	}
}

// Every message of a call confirmed: nil for each, all in the queue.
func TestPublishBatchConfirmed(t *testing.T) {
	topic, queue := name("ok"), name("ok_q")
	topology(t, topic, "fanout", queue, "", nil)
	p := newPublisher(t, amqp.Config{MaxInFlight: 64}) // a window smaller than the call
	errs := p.PublishBatch(context.Background(), topic, messages(500)...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if n := depth(t, queue); n != 500 {
		t.Fatalf("queue holds %d messages, want 500", n)
	}
	if err := p.Publish(topic, messages(3)...); err != nil {
		t.Fatal(err)
	}
}

// One message of the window unroutable (its routing key matches no binding):
// exactly it fails, with ErrReturned, the topology's condition (not
// relay.ErrRejected: binding a queue publishes it); the others are confirmed
// and stored.
func TestPublishBatchReturnedMidWindow(t *testing.T) {
	topic, queue := name("ret"), name("ret_q")
	topology(t, topic, "direct", queue, "ok", nil)
	p := newPublisher(t, amqp.Config{ExchangeType: "direct", RoutingKey: func(_ string, m *message.Message) string {
		return m.Metadata.Get("route")
	}})
	msgs := messages(200)
	for i, m := range msgs {
		m.Metadata.Set("route", map[bool]string{true: "nowhere", false: "ok"}[i == 117])
	}
	errs := p.PublishBatch(context.Background(), topic, msgs...)
	for i, err := range errs {
		switch {
		case i == 117 && (!errors.Is(err, amqp.ErrReturned) || errors.Is(err, relay.ErrRejected)):
			t.Fatalf("the unroutable message: %v, want ErrReturned, not relay.ErrRejected", err)
		case i != 117 && err != nil:
			t.Fatalf("message %d: %v", i, err)
		}
	}
	t.Log(errs[117])
	if n := depth(t, queue); n != 199 {
		t.Fatalf("queue holds %d messages, want 199", n)
	}
	// The channel serves the next call: no route, every message returned.
	for i, err := range p.PublishBatch(context.Background(), topic, messages(10)...) {
		if !errors.Is(err, amqp.ErrReturned) {
			t.Fatalf("message %d without a route: %v, want ErrReturned", i, err)
		}
	}
}

// An exchange with no queue bound: every message is returned, none counted
// as published.
func TestPublishBatchNoQueue(t *testing.T) {
	topic := name("noq")
	t.Cleanup(func() { cleanup(topic, "") })
	p := newPublisher(t, amqp.Config{})
	for i, err := range p.PublishBatch(context.Background(), topic, messages(20)...) {
		if !errors.Is(err, amqp.ErrReturned) {
			t.Fatalf("message %d: %v, want ErrReturned", i, err)
		}
	}
}

// One message of the window refused by the broker (basic.nack: it would
// overflow a queue with x-overflow reject-publish): exactly it fails, with
// ErrNacked.
// With a window of one, publishes go one at a time, with the same results.
func TestPublishBatchNackedMidWindow(t *testing.T) {
	for _, window := range []int{1024, 1} {
		t.Run(fmt.Sprintf("MaxInFlight=%d", window), func(t *testing.T) {
			topic, queue := name("nack"), name("nack_q")
			topology(t, topic, "fanout", queue, "", amqp091.Table{"x-max-length-bytes": int64(64 << 10), "x-overflow": "reject-publish"})
			p := newPublisher(t, amqp.Config{MaxInFlight: window})
			msgs := messages(200)
			msgs[100].Payload = make([]byte, 128<<10) // alone over the queue's bound
			errs := p.PublishBatch(context.Background(), topic, msgs...)
			for i, err := range errs {
				switch {
				case i == 100 && !errors.Is(err, amqp.ErrNacked):
					t.Fatalf("the refused message: %v, want ErrNacked", err)
				case i != 100 && err != nil:
					t.Fatalf("message %d: %v", i, err)
				}
			}
			if n := depth(t, queue); n != 199 {
				t.Fatalf("queue holds %d messages, want 199", n)
			}
		})
	}
}

// Concurrent calls share the window and each gets its own results.
func TestPublishBatchConcurrent(t *testing.T) {
	topic, queue := name("conc"), name("conc_q")
	topology(t, topic, "fanout", queue, "", nil)
	p := newPublisher(t, amqp.Config{MaxInFlight: 100})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i, err := range p.PublishBatch(context.Background(), topic, messages(250)...) {
				if err != nil {
					t.Errorf("message %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	if n := depth(t, queue); n != 2000 {
		t.Fatalf("queue holds %d messages, want 2000", n)
	}
}

// A context that ends fails the call's unconfirmed messages; the publisher
// works on.
func TestPublishBatchContextDone(t *testing.T) {
	topic, queue := name("ctx"), name("ctx_q")
	topology(t, topic, "fanout", queue, "", nil)
	p := newPublisher(t, amqp.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range p.PublishBatch(ctx, topic, messages(5)...) {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("message %d: %v, want context.Canceled", i, err)
		}
	}
	for i, err := range p.PublishBatch(context.Background(), topic, messages(5)...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// The broker closes the channel (a publish to a missing exchange) and then
// the connection: the calls then fail, and the next calls work again.
func TestReconnect(t *testing.T) {
	topic, queue := name("rec"), name("rec_q")
	topology(t, topic, "fanout", queue, "", nil)
	missing := name("missing")
	p := newPublisher(t, amqp.Config{NoDeclare: true})
	ok := func(what string) {
		t.Helper()
		for i, err := range p.PublishBatch(context.Background(), topic, messages(10)...) {
			if err != nil {
				t.Fatalf("%s: message %d: %v", what, i, err)
			}
		}
	}
	ok("first call")
	for i, err := range p.PublishBatch(context.Background(), missing, messages(10)...) {
		if err == nil {
			t.Fatalf("message %d to a missing exchange confirmed", i)
		}
		if i == 0 {
			t.Log(err)
		}
	}
	ok("after the channel closed")

	bin, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		t.Skip("no rabbitmqctl to close the connection from the broker's side")
	}
	local := amqp.LocalAddr(p)
	// rabbitmqctl names a connection "client -> server".
	out, err := exec.Command(bin, "-q", "list_connections", "pid", "name").Output()
	if err != nil {
		t.Skipf("rabbitmqctl list_connections: %v", err)
	}
	var conn string
	for _, l := range strings.Split(string(out), "\n") {
		if pid, n, ok := strings.Cut(l, "\t"); ok && strings.HasPrefix(n, local+" ->") {
			conn = pid
		}
	}
	if conn == "" {
		t.Skipf("connection %s not listed by rabbitmqctl", local)
	}
	if out, err := exec.Command(bin, "close_connection", conn, "herald test").CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl close_connection: %v: %s", err, out)
	}
	testkit.Eventually(t, 10*time.Second, "connection closed", func() bool { return amqp.LocalAddr(p) != local })
	ok("after the connection closed")
	if amqp.LocalAddr(p) == local {
		t.Fatal("the publisher did not dial again")
	}
	if n := depth(t, queue); n != 30 {
		t.Fatalf("queue holds %d messages, want 30", n)
	}
}

// A call on a closed publisher fails.
func TestClosed(t *testing.T) {
	p := newPublisher(t, amqp.Config{})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(name("closed"), messages(1)...); !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("Publish after Close: %v, want ErrClosed", err)
	}
}

// A watermill-amqp subscriber with the durable pub/sub config reads what this
// publisher sends: the same UUID, metadata and payload.
func TestWatermillSubscriber(t *testing.T) {
	topic := name("wm")
	cfg := wmamqp.NewDurablePubSubConfig(url(), wmamqp.GenerateQueueNameTopicNameWithSuffix("sub"))
	t.Cleanup(func() { cleanup(topic, topic+"_sub") })
	sub, err := wmamqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	got := testkit.Consume(t, sub, topic)
	p := newPublisher(t, amqp.Config{})
	msgs := messages(50)
	msgs[7].Metadata.Set("herald_type", "account.deposited")
	msgs[7].Metadata.Set("empty", "")
	for i, err := range p.PublishBatch(context.Background(), topic, msgs...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "50 messages", func() bool { return got.Distinct() == 50 })
	byID := map[string]*message.Message{}
	for _, m := range got.Snapshot() {
		byID[m.UUID] = m
	}
	for _, want := range msgs {
		m := byID[want.UUID]
		if m == nil {
			t.Fatalf("message %s not received", want.UUID)
		}
		if !m.Equals(want) {
			t.Fatalf("received %s %v %q, sent %v %q", m.UUID, m.Metadata, m.Payload, want.Metadata, want.Payload)
		}
	}
}

// The deliveries of this publisher and of watermill-amqp's (DefaultMarshaler)
// for the same message are the same: body, headers, delivery mode.
func TestEncodingMatchesWatermill(t *testing.T) {
	topic, queue := name("enc"), name("enc_q")
	topology(t, topic, "fanout", queue, "", nil)
	m := message.NewMessage(watermill.NewUUID(), []byte(`{"a":1}`))
	m.Metadata.Set("herald_id", m.UUID)
	m.Metadata.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")

	wcfg := wmamqp.NewDurablePubSubConfig(url(), nil)
	wcfg.Publish.ConfirmDelivery = true
	wpub, err := wmamqp.NewPublisher(wcfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = wpub.Close() }()
	if err := wpub.Publish(topic, m.Copy()); err != nil {
		t.Fatal(err)
	}
	if err := newPublisher(t, amqp.Config{}).Publish(topic, m.Copy()); err != nil {
		t.Fatal(err)
	}
	ch := admin(t)
	var got []amqp091.Delivery
	for len(got) < 2 {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		got = append(got, d)
	}
	w, h := got[0], got[1]
	if string(w.Body) != string(h.Body) || w.DeliveryMode != h.DeliveryMode || w.ContentType != h.ContentType || w.MessageId != h.MessageId {
		t.Fatalf("watermill %+v\nherald %+v", w, h)
	}
	if len(w.Headers) != len(h.Headers) {
		t.Fatalf("headers: watermill %v, herald %v", w.Headers, h.Headers)
	}
	for k, v := range w.Headers {
		if h.Headers[k] != v {
			t.Fatalf("header %s: watermill %v, herald %v", k, v, h.Headers[k])
		}
	}
	if h.DeliveryMode != amqp091.Persistent {
		t.Fatalf("delivery mode %d, want persistent", h.DeliveryMode)
	}
}
