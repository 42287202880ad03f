package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/publishers/natsjs"
)

// newConsumer returns a consumer name of this test's own.
func newConsumer(prefix string) string {
	return fmt.Sprintf("herald_natsjs_%s_%d", prefix, seq.Add(1))
}

// newSubscriber returns a Subscriber on the shared server, closed when the
// test ends (closing it again is harmless).
func newSubscriber(t testing.TB, cfg natsjs.SubscriberConfig) *natsjs.Subscriber {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = natsURL()
	}
	if cfg.Logger == nil {
		cfg.Logger = testkit.Quiet()
	}
	s, err := natsjs.NewSubscriber(cfg)
	if err != nil {
		t.Fatalf("natsjs.NewSubscriber: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// next is the next message of ch, or fails the test after timeout.
func next(t testing.TB, ch <-chan *message.Message, timeout time.Duration) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("subscription closed")
		}
		return m
	case <-time.After(timeout):
		t.Fatalf("no message within %v", timeout)
	}
	return nil
}

// A consumer killed in the middle of a handler (its subscriber closed, the
// message not acked) loses nothing: a new subscriber of the same consumer
// gets that message again, and only it: the message acked before is not
// delivered again, because the durable consumer, its position and its
// unacknowledged message outlived the subscriber.
func TestSubscriberKilledMidHandlerRedelivers(t *testing.T) {
	topic := newTopic(t, "kill")
	consumer := newConsumer("kill")
	pub := newPublisher(t, natsjs.Config{AutoProvision: true})
	msgs := newMessages(2)
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	cfg := natsjs.SubscriberConfig{Consumer: consumer, AckWait: 2 * time.Second, AutoProvision: true}

	first := newSubscriber(t, cfg)
	ch, err := first.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	m := next(t, ch, 10*time.Second)
	if m.UUID != msgs[0].UUID || m.Metadata.Get("herald_type") != "test.event" {
		t.Fatalf("first message %s %v, want %s with its metadata", m.UUID, m.Metadata, msgs[0].UUID)
	}
	m.Ack() // the first handler commits
	// The callback acks (AckSync) before it takes the next message: once
	// the second is here, the first's ack is on the server.
	blocked := next(t, ch, 10*time.Second)
	if blocked.UUID != msgs[1].UUID {
		t.Fatalf("second message %s, want %s", blocked.UUID, msgs[1].UUID)
	}
	// The second handler blocks (never acks); the consumer is killed.
	closed := make(chan error, 1)
	go func() { closed <- first.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Close blocked on the handler")
	}
	blocked.Ack() // too late: the subscriber is gone, nothing is sent

	_, j := js(t)
	c, err := j.PushConsumer(context.Background(), natsjs.DefaultStreamConfig(topic).Name, consumer)
	if err != nil {
		t.Fatalf("the durable consumer did not outlive its subscriber: %v", err)
	}
	if info := c.CachedInfo(); info.AckFloor.Stream != 1 || info.Config.MaxDeliver != -1 ||
		info.Config.AckPolicy != jetstream.AckExplicitPolicy || info.Config.DeliverGroup != consumer {
		t.Fatalf("consumer: ack floor %d (want 1), max deliver %d (want -1), ack policy %v, deliver group %q",
			info.AckFloor.Stream, info.Config.MaxDeliver, info.Config.AckPolicy, info.Config.DeliverGroup)
	}

	second := newSubscriber(t, cfg)
	ch, err = second.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	again := next(t, ch, 15*time.Second) // after AckWait
	if again.UUID != msgs[1].UUID {
		t.Fatalf("redelivered %s, want the unacked %s", again.UUID, msgs[1].UUID)
	}
	again.Ack()
	select {
	case m := <-ch:
		t.Fatalf("message %s delivered again after its ack", m.UUID)
	case <-time.After(3 * time.Second):
	}
}

// The premise of SubscribeInitialize: a watermill-nats subscriber that
// creates its durable consumer itself (the hand-written configuration) has
// nats.go delete it when it closes, and with it the consumer's position: a
// restart reads the stream from its start again.
func TestWatermillSubscriberDeletesTheConsumerItCreated(t *testing.T) {
	topic := newTopic(t, "wmdel")
	pub := newPublisher(t, natsjs.Config{AutoProvision: true})
	if err := pub.Publish(topic, newMessages(1)...); err != nil {
		t.Fatal(err)
	}
	consumer := newConsumer("wmdel")
	cfg := subscriberConfig(consumer)
	sub, err := wmnats.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch, 10*time.Second).Ack()
	_, j := js(t)
	if _, err := j.PushConsumer(context.Background(), topic, consumer); err != nil {
		t.Fatalf("consumer while subscribed: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the consumer deleted", func() bool {
		_, err := j.PushConsumer(context.Background(), topic, consumer)
		return errors.Is(err, jetstream.ErrConsumerNotFound)
	})
}

// A topic with a '.' is subscribed to on the stream Publisher makes for it
// (named with '_'), which watermill-nats' own AutoProvision cannot make.
func TestSubscriberDottedTopic(t *testing.T) {
	topic := newTopic(t, "dotted") + ".order.paid"
	t.Cleanup(func() { deleteStreams(natsjs.DefaultStreamConfig(topic).Name) })
	sub := newSubscriber(t, natsjs.SubscriberConfig{Consumer: newConsumer("dotted"), AutoProvision: true})
	ch, err := sub.Subscribe(context.Background(), topic) // before the first publish
	if err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, natsjs.Config{AutoProvision: true})
	msgs := newMessages(1)
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	m := next(t, ch, 10*time.Second)
	m.Ack()
	if m.UUID != msgs[0].UUID {
		t.Fatalf("got %s, want %s", m.UUID, msgs[0].UUID)
	}
}

// Without AutoProvision a topic no stream captures fails Subscribe, saying
// so; a consumer whose settings differ from the existing durable consumer
// fails Subscribe, naming the setting.
func TestSubscriberRefuses(t *testing.T) {
	topic := newTopic(t, "refuse")
	sub := newSubscriber(t, natsjs.SubscriberConfig{Consumer: newConsumer("refuse")})
	if _, err := sub.Subscribe(context.Background(), topic); err == nil || !strings.Contains(err.Error(), "no stream captures") {
		t.Fatalf("Subscribe with no stream: %v", err)
	}
	if _, err := sub.Subscribe(context.Background(), "a..b"); !errors.Is(err, nats.ErrBadSubject) {
		t.Fatalf("Subscribe to a bad subject: %v", err)
	}

	consumer := newConsumer("refuse")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := newSubscriber(t, natsjs.SubscriberConfig{Consumer: consumer, AutoProvision: true}).Subscribe(ctx, topic); err != nil {
		t.Fatal(err)
	}
	other := newSubscriber(t, natsjs.SubscriberConfig{Consumer: consumer, AckWait: time.Minute})
	if _, err := other.Subscribe(ctx, topic); !errors.Is(err, natsjs.ErrConsumerMismatch) || !strings.Contains(err.Error(), "ack wait 30s, want 1m0s") {
		t.Fatalf("Subscribe with another AckWait: %v", err)
	}
}

// A bad configuration fails at NewSubscriber, before any connection.
func TestNewSubscriberRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]natsjs.SubscriberConfig{
		"no URL":              {Consumer: "shipping"},
		"no Consumer":         {URL: natsURL()},
		"Consumer with a dot": {URL: natsURL(), Consumer: "order.shipping"},
		"Consumer with space": {URL: natsURL(), Consumer: "order shipping"},
		"negative AckWait":    {URL: natsURL(), Consumer: "shipping", AckWait: -time.Second},
		"negative MaxDeliver": {URL: natsURL(), Consumer: "shipping", MaxDeliver: -1},
		"negative NakDelay":   {URL: natsURL(), Consumer: "shipping", NakDelay: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			if err := cfg.Validate(); err == nil {
				t.Fatal("Validate accepted it")
			}
			if s, err := natsjs.NewSubscriber(cfg); err == nil {
				_ = s.Close()
				t.Fatal("NewSubscriber accepted it")
			}
		})
	}
	if err := (natsjs.SubscriberConfig{URL: natsURL(), Consumer: "shipping"}).Validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	w := natsjs.SubscriberConfig{Consumer: "shipping"}.Watermill()
	if w.AckWaitTimeout != natsjs.DefaultSubscriberAckWait || w.QueueGroupPrefix != "shipping" ||
		w.JetStream.DurablePrefix != "shipping" || w.JetStream.AutoProvision || w.JetStream.AckAsync || w.SubscribersCount != 1 {
		t.Fatalf("Watermill() = %+v", w)
	}
}
