// Package brokertest connects tests to the real brokers on this machine (NATS
// JetStream, RabbitMQ) through their Watermill adapters, and starts private
// NATS servers for tests that stop a broker.
package brokertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// NATSURL is the shared NATS server (HERALD_TEST_NATS_URL overrides).
func NATSURL() string {
	if v := os.Getenv("HERALD_TEST_NATS_URL"); v != "" {
		return v
	}
	return "nats://127.0.0.1:4222"
}

// AMQPURL is the shared RabbitMQ (HERALD_TEST_AMQP_URL overrides).
func AMQPURL() string {
	if v := os.Getenv("HERALD_TEST_AMQP_URL"); v != "" {
		return v
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// Topic returns a topic name unique to this test run, valid for every broker
// (JetStream stream names allow no dots).
func Topic(prefix string) string {
	return fmt.Sprintf("herald_%s_%d_%d", prefix, os.Getpid(), time.Now().UnixNano())
}

// NATSPublisherConfig is the JetStream publisher configuration Herald's tests
// and examples use: streams provisioned on first use, NATS headers marshaling
// (which carries the message UUID).
func NATSPublisherConfig(url string) wmnats.PublisherConfig {
	return wmnats.PublisherConfig{
		URL:         url,
		NatsOptions: natsOptions(),
		Marshaler:   &wmnats.NATSMarshaler{},
		JetStream:   wmnats.JetStreamConfig{AutoProvision: true},
	}
}

// natsOptions keep a client connecting and reconnecting forever, from the start:
// a broker that is down when a process starts is not an error.
func natsOptions() []nats.Option {
	return []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond), nats.RetryOnFailedConnect(true)}
}

// NATSSubscriberConfig is the matching durable JetStream subscriber.
func NATSSubscriberConfig(url, durable string) wmnats.SubscriberConfig {
	return wmnats.SubscriberConfig{
		URL:              url,
		NatsOptions:      natsOptions(),
		QueueGroupPrefix: durable,
		SubscribersCount: 1,
		AckWaitTimeout:   5 * time.Second,
		CloseTimeout:     5 * time.Second,
		Unmarshaler:      &wmnats.NATSMarshaler{},
		JetStream: wmnats.JetStreamConfig{
			AutoProvision:    true,
			DurablePrefix:    durable,
			SubscribeOptions: []nats.SubOpt{nats.DeliverAll(), nats.AckExplicit(), nats.AckWait(5 * time.Second)},
		},
	}
}

// NATS returns a JetStream publisher and subscriber on url, closed and with
// their streams deleted when the test ends.
func NATS(t testing.TB, url string, topics ...string) (message.Publisher, message.Subscriber) {
	t.Helper()
	pub, err := wmnats.NewPublisher(NATSPublisherConfig(url), watermill.NopLogger{})
	if err != nil {
		t.Fatalf("brokertest: NATS publisher on %s: %v", url, err)
	}
	sub, err := wmnats.NewSubscriber(NATSSubscriberConfig(url, "herald_test"), watermill.NopLogger{})
	if err != nil {
		t.Fatalf("brokertest: NATS subscriber on %s: %v", url, err)
	}
	t.Cleanup(func() {
		_ = sub.Close()
		_ = pub.Close()
		DeleteStreams(url, topics...)
	})
	return pub, sub
}

// DeleteStreams removes JetStream streams, ignoring errors.
func DeleteStreams(url string, names ...string) {
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return
	}
	for _, n := range names {
		_ = js.DeleteStream(n)
	}
}

// AMQP returns a RabbitMQ publisher and subscriber on durable queues (the topic is
// the queue), closed and with the queues deleted when the test ends.
func AMQP(t testing.TB, topics ...string) (message.Publisher, message.Subscriber) {
	t.Helper()
	cfg := amqp.NewDurableQueueConfig(AMQPURL())
	pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("brokertest: RabbitMQ publisher: %v", err)
	}
	sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("brokertest: RabbitMQ subscriber: %v", err)
	}
	t.Cleanup(func() {
		_ = sub.Close()
		_ = pub.Close()
		deleteQueues(topics...)
	})
	return pub, sub
}

func deleteQueues(names ...string) {
	conn, err := amqp091.Dial(AMQPURL())
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer func() { _ = ch.Close() }()
	for _, n := range names {
		_, _ = ch.QueueDelete(n, false, false, false)
	}
}

// NATSServer is a private nats-server with JetStream, for tests and the chaos
// run that stop and start a broker without touching the shared one.
type NATSServer struct {
	Port int
	dir  string
	cmd  *exec.Cmd
}

// StartNATS starts a nats-server with JetStream on a free port, stored in a
// temporary directory; it is killed (by pid) when the test ends.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	s, err := NewNATSServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// NewNATSServer prepares a server storing in dir, on a free port; Start starts it.
func NewNATSServer(dir string) (*NATSServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return &NATSServer{Port: port, dir: dir}, nil
}

// URL is the server's client URL.
func (s *NATSServer) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port) }

// Start starts the server (again) on its port and store, and waits until
// JetStream answers.
func (s *NATSServer) Start() error {
	bin := "nats-server"
	if _, err := exec.LookPath(bin); err != nil {
		bin = "/usr/sbin/nats-server"
	}
	s.cmd = exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(s.Port), "-js", "-sd", s.dir)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("brokertest: start nats-server: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if nc, err := nats.Connect(s.URL(), nats.Timeout(200*time.Millisecond)); err == nil {
			js, _ := nc.JetStream()
			_, err = js.AccountInfo()
			nc.Close()
			if err == nil {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("brokertest: JetStream on :%d not ready", s.Port)
}

// Stop kills the server (SIGKILL, by pid) and waits for it to exit.
func (s *NATSServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_, _ = s.cmd.Process.Wait()
	s.cmd = nil
}

// Connect returns a publisher and a subscriber for topic on one broker, closed
// and cleaned up when the test ends.
type Connect func(t testing.TB, topic string) (message.Publisher, message.Subscriber)

// Brokers are the real brokers of this machine, by name: every test that must
// hold on each runs against all of them.
func Brokers() map[string]Connect {
	return map[string]Connect{
		"nats-jetstream": func(t testing.TB, topic string) (message.Publisher, message.Subscriber) {
			return NATS(t, NATSURL(), topic)
		},
		"rabbitmq": func(t testing.TB, topic string) (message.Publisher, message.Subscriber) {
			return AMQP(t, topic)
		},
	}
}
