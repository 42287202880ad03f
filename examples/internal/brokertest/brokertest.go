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
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/heraldgo/herald/internal/testkit/tb"
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

// RedisURL is the shared Redis (HERALD_TEST_REDIS_URL overrides).
func RedisURL() string {
	if v := os.Getenv("HERALD_TEST_REDIS_URL"); v != "" {
		return v
	}
	return "redis://127.0.0.1:6379/0"
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

// NATSSubscriberConfig is the matching durable JetStream subscriber. Its
// subscriptions ack by hand (nats.ManualAck): without it nats.go acks every
// message when watermill-nats' callback returns, and that callback returns
// when AckWaitTimeout passes with the handler still running (a handler
// waiting for a lock, say), so a message whose handler then fails is acked
// all the same and never redelivered: lost behind the inbox.
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
			SubscribeOptions: []nats.SubOpt{nats.DeliverAll(), nats.AckExplicit(), nats.ManualAck(), nats.AckWait(5 * time.Second)},
		},
	}
}

// NATS returns a JetStream publisher and subscriber on url, closed and with
// their streams deleted when the test ends.
func NATS(t tb.TB, url string, topics ...string) (message.Publisher, message.Subscriber) {
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
// the queue), closed and with the queues deleted when the test ends. The
// publisher waits for RabbitMQ's confirm (Publish.ConfirmDelivery, which the
// preset leaves off): without it Publish returns before the message is stored.
func AMQP(t tb.TB, topics ...string) (message.Publisher, message.Subscriber) {
	t.Helper()
	cfg := amqp.NewDurableQueueConfig(AMQPURL())
	cfg.Publish.ConfirmDelivery = true
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
// run that stop and start a broker without touching the shared one; a node of
// a NATSCluster when Name is set.
type NATSServer struct {
	Port int
	dir  string
	cmd  *exec.Cmd
	// exited is closed when the process launched last exits (err then
	// holds how), the output is in the server's log file.
	exited chan struct{}
	err    error
	// Name, ClusterPort and routes: the node's server name, its cluster
	// listener and the other nodes' cluster URLs (StartNATSCluster).
	Name        string
	ClusterPort int
	routes      []string
}

// StartNATS starts a nats-server with JetStream on a free port, stored in a
// temporary directory; it is killed (by pid) when the test ends.
func StartNATS(t tb.TB) *NATSServer {
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
	if err := s.launch(); err != nil {
		return err
	}
	return s.ready()
}

// logPath is where the server's output goes, beside its store.
func (s *NATSServer) logPath() string {
	return filepath.Join(s.dir, fmt.Sprintf("nats-server-%d.log", s.Port))
}

// launch starts the server's process (again), without waiting for it; its
// output is appended to its log file.
func (s *NATSServer) launch() error {
	bin := "nats-server"
	if _, err := exec.LookPath(bin); err != nil {
		bin = "/usr/sbin/nats-server"
	}
	args := []string{"-a", "127.0.0.1", "-p", fmt.Sprint(s.Port), "-js", "-sd", s.dir}
	if s.Name != "" {
		args = append(args, "-n", s.Name, "--cluster_name", "herald", "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", s.ClusterPort),
			"--routes", strings.Join(s.routes, ","))
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("brokertest: nats-server store: %w", err)
	}
	out, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("brokertest: nats-server log: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("brokertest: start nats-server: %w", err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	go func() {
		s.err = cmd.Wait()
		_ = out.Close()
		close(exited)
	}()
	return nil
}

// ready waits until the server's JetStream answers (in a cluster: once the
// cluster elected its meta leader), up to a minute: a restart recovers the
// store first, which takes long on a loaded machine. A process that exits
// before (its port not yet free again, say) is started again, twice at most.
func (s *NATSServer) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	relaunched := 0
	for ctx.Err() == nil {
		select {
		case <-s.exited:
			if relaunched == 2 {
				return fmt.Errorf("brokertest: nats-server on :%d exited (%w): %s", s.Port, s.err, s.logTail())
			}
			relaunched++
			time.Sleep(500 * time.Millisecond)
			if err := s.launch(); err != nil {
				return err
			}
			continue
		default:
		}
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
	return fmt.Errorf("brokertest: JetStream on :%d not ready within a minute: %s", s.Port, s.logTail())
}

// logTail is the end of the server's log file.
func (s *NATSServer) logTail() string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Stop kills the server (SIGKILL, by pid) and waits for it to exit.
func (s *NATSServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// NATSCluster is a JetStream cluster of private nats-server nodes.
type NATSCluster struct {
	Nodes []*NATSServer
}

// StartNATSCluster starts a JetStream cluster of n nodes (n >= 3 for
// replicated streams), each on free ports with a store of its own, and
// waits until JetStream answers on each; the nodes are killed (by pid) when
// the test ends.
func StartNATSCluster(t tb.TB, n int) *NATSCluster {
	t.Helper()
	c := &NATSCluster{}
	for i := range n {
		s, err := NewNATSServer(filepath.Join(t.TempDir(), fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		cs, err := NewNATSServer("")
		if err != nil {
			t.Fatal(err)
		}
		s.Name, s.ClusterPort = fmt.Sprintf("herald-%d", i), cs.Port
		c.Nodes = append(c.Nodes, s)
	}
	for _, s := range c.Nodes {
		for _, o := range c.Nodes {
			if o != s {
				s.routes = append(s.routes, fmt.Sprintf("nats://127.0.0.1:%d", o.ClusterPort))
			}
		}
		if err := s.launch(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
	}
	for _, s := range c.Nodes {
		if err := s.ready(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// URL is the client URL of every node: a client fails over between them.
func (c *NATSCluster) URL() string {
	urls := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// Node returns the node named name, or nil.
func (c *NATSCluster) Node(name string) *NATSServer {
	for _, s := range c.Nodes {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Connect returns a publisher and a subscriber for topic on one broker, closed
// and cleaned up when the test ends.
type Connect func(t tb.TB, topic string) (message.Publisher, message.Subscriber)

// Brokers are the real brokers of this machine, by name: every test that must
// hold on each runs against all of them.
func Brokers() map[string]Connect {
	return map[string]Connect{
		"nats-jetstream": func(t tb.TB, topic string) (message.Publisher, message.Subscriber) {
			return NATS(t, NATSURL(), topic)
		},
		"rabbitmq": func(t tb.TB, topic string) (message.Publisher, message.Subscriber) {
			return AMQP(t, topic)
		},
		"redis-streams": func(t tb.TB, topic string) (message.Publisher, message.Subscriber) {
			return Redis(t, topic)
		},
	}
}

// Redis returns a Redis Streams publisher and a subscriber in a consumer
// group that reads each stream from its first entry, closed and with the
// streams deleted when the test ends. Publish returns once XADD has the
// entry in Redis's memory; whether it outlives a restart of Redis is the
// server's persistence (appendonly with fsync), not the client's.
func Redis(t tb.TB, topics ...string) (message.Publisher, message.Subscriber) {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("brokertest: Redis URL: %v", err)
	}
	client := redis.NewClient(opt)
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: client}, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("brokertest: Redis publisher: %v", err)
	}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: client, ConsumerGroup: "herald_test", Consumer: "herald_test", OldestId: "0",
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("brokertest: Redis subscriber: %v", err)
	}
	t.Cleanup(func() {
		_ = sub.Close()
		_ = pub.Close()
		if len(topics) > 0 {
			_ = client.Del(context.Background(), topics...).Err()
		}
		_ = client.Close()
	})
	return pub, sub
}
