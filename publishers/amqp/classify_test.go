package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/publishers/amqp"
	"github.com/heraldgo/herald/relay"
)

// Issue 30, item 6: a metadata key over 255 bytes cannot be an AMQP header
// (a field name is a short string). It is refused alone, before anything of
// it is written to the connection: the messages before and after it in the
// call are confirmed, and the connection stays up.
func TestHeaderKeyTooLongRefusedAlone(t *testing.T) {
	topic, queue := name("longkey"), name("longkey_q")
	topology(t, topic, "fanout", queue, "", nil)
	p := newPublisher(t, amqp.Config{})
	for i, err := range p.PublishBatch(context.Background(), topic, messages(1)...) {
		if err != nil {
			t.Fatalf("first call, message %d: %v", i, err)
		}
	}
	local := amqp.LocalAddr(p)
	msgs := messages(5)
	msgs[2].Metadata.Set(strings.Repeat("k", 256), "v")
	errs := p.PublishBatch(context.Background(), topic, msgs...)
	for i, err := range errs {
		switch {
		case i == 2 && (!errors.Is(err, amqp.ErrUnframable) || !errors.Is(err, relay.ErrRejected)):
			t.Errorf("the message with a long key: %v, want ErrUnframable wrapping relay.ErrRejected", err)
		case i != 2 && err != nil:
			t.Errorf("message %d: %v, want it confirmed", i, err)
		}
	}
	if got := amqp.LocalAddr(p); got != local {
		t.Errorf("connection %q after the call, was %q: the bad message took it down", got, local)
	}
	if n := depth(t, queue); n != 5 {
		t.Fatalf("queue holds %d messages, want 5", n)
	}
}

// A header too large for one frame (the content header is never split; the
// server's frame_max is 128 KiB) is refused alone the same way.
func TestHeadersOverFrameMaxRefusedAlone(t *testing.T) {
	topic, queue := name("bigheader"), name("bigheader_q")
	topology(t, topic, "fanout", queue, "", nil)
	p := newPublisher(t, amqp.Config{})
	msgs := messages(5)
	msgs[2].Metadata.Set("big", strings.Repeat("v", 200<<10))
	for i, err := range p.PublishBatch(context.Background(), topic, msgs...) {
		switch {
		case i == 2 && (!errors.Is(err, amqp.ErrUnframable) || !errors.Is(err, relay.ErrRejected)):
			t.Errorf("the message with a big header: %v, want ErrUnframable wrapping relay.ErrRejected", err)
		case i != 2 && err != nil:
			t.Errorf("message %d: %v, want it confirmed", i, err)
		}
	}
	if n := depth(t, queue); n != 4 {
		t.Fatalf("queue holds %d messages, want 4", n)
	}
}

// verdict is what a row of the contract's table says Herald does with a
// message's failure.
type verdict int

const (
	published verdict = iota // every message confirmed
	refused                  // each failed message's error wraps relay.ErrRejected: a strike at once
	outage                   // each failed message's error is a plain one: retried, it kills nothing
)

func (v verdict) String() string { return [...]string{"published", "refused", "outage"}[v] }

// TestContract runs each row of the table in the package documentation
// ("Whose fault a failure is") against the RabbitMQ server here: the
// condition is produced, and every failed message's result must be the
// row's verdict, wrapping the row's error; the row says how many fail.
func TestContract(t *testing.T) {
	t.Parallel()
	for _, row := range []struct {
		condition string
		want      verdict
		wantErr   error
		run       func(t *testing.T) (errs []error, fail int) // fail -1: all
	}{
		{"too large alone (headers over frame_max)", refused, amqp.ErrUnframable, func(t *testing.T) ([]error, int) {
			topic := fanout(t)
			msgs := messages(3)
			msgs[1].Metadata.Set("big", strings.Repeat("v", 200<<10))
			return newPublisher(t, amqp.Config{}).PublishBatch(context.Background(), topic, msgs...), 1
		}},
		{"too large alone (body over the server's max_message_size)", refused, amqp.ErrTooLarge, func(t *testing.T) ([]error, int) {
			if testing.Short() {
				t.Skip("sends a body over RabbitMQ's max_message_size (128 MiB by default)")
			}
			topic := fanout(t)
			p := newPublisher(t, amqp.Config{MaxInFlight: 1}) // msgs[0] confirmed before the big one goes
			msgs := messages(3)
			msgs[1].Payload = make([]byte, 128<<20+1)
			// The first time RabbitMQ closes the channel (406): the big
			// message is refused, the one after it in the call fails with the
			// channel, an outage.
			errs := p.PublishBatch(context.Background(), topic, msgs...)
			if errs[0] != nil || !errors.Is(errs[1], amqp.ErrTooLarge) || !errors.Is(errs[1], relay.ErrRejected) ||
				!errors.Is(errs[2], amqp.ErrChannelClosed) || errors.Is(errs[2], relay.ErrRejected) {
				t.Fatalf("first call: %v, want confirmed, ErrTooLarge (refused), ErrChannelClosed (outage)", errs)
			}
			// Then the publisher knows the limit: the big message is refused
			// before it is sent, its neighbours go.
			return p.PublishBatch(context.Background(), topic, msgs...), 1
		}},
		{"too large as a batch", published, nil, func(t *testing.T) ([]error, int) {
			t.Skip("AMQP has no batch to refuse: each message is published, and confirmed or not, alone")
			return nil, 0
		}},
		{"bad header (a name over 255 bytes)", refused, amqp.ErrUnframable, func(t *testing.T) ([]error, int) {
			topic := fanout(t)
			msgs := messages(3)
			msgs[1].Metadata.Set(strings.Repeat("k", 256), "v")
			return newPublisher(t, amqp.Config{}).PublishBatch(context.Background(), topic, msgs...), 1
		}},
		{"bad routing key (over 255 bytes)", refused, amqp.ErrUnframable, func(t *testing.T) ([]error, int) {
			topic := fanout(t)
			msgs := messages(3)
			msgs[1].Metadata.Set("route", strings.Repeat("r", 256))
			p := newPublisher(t, amqp.Config{RoutingKey: func(_ string, m *message.Message) string { return m.Metadata.Get("route") }})
			return p.PublishBatch(context.Background(), topic, msgs...), 1
		}},
		{"bad exchange name (over 255 bytes)", refused, amqp.ErrUnframable, func(t *testing.T) ([]error, int) {
			return newPublisher(t, amqp.Config{}).PublishBatch(context.Background(), strings.Repeat("x", 256), messages(2)...), -1
		}},
		{"full queue (x-overflow reject-publish)", outage, amqp.ErrNacked, func(t *testing.T) ([]error, int) {
			topic, queue := name("c_full"), name("c_full_q")
			topology(t, topic, "fanout", queue, "", amqp091.Table{"x-max-length": int64(2), "x-overflow": "reject-publish"})
			return newPublisher(t, amqp.Config{MaxInFlight: 1}).PublishBatch(context.Background(), topic, messages(5)...), 3
		}},
		{"unroutable (no queue bound)", outage, amqp.ErrReturned, func(t *testing.T) ([]error, int) {
			topic := name("c_noq")
			t.Cleanup(func() { cleanup(topic, "") })
			return newPublisher(t, amqp.Config{}).PublishBatch(context.Background(), topic, messages(2)...), -1
		}},
		{"exchange missing (NoDeclare)", outage, amqp.ErrChannelClosed, func(t *testing.T) ([]error, int) {
			return newPublisher(t, amqp.Config{NoDeclare: true}).PublishBatch(context.Background(), name("c_missing"), messages(2)...), -1
		}},
		{"permission denied (no write permission on the exchange)", outage, amqp.ErrChannelClosed, func(t *testing.T) ([]error, int) {
			topic := fanout(t)
			user := limitedUser(t)
			p, err := amqp.New(amqp.Config{URL: fmt.Sprintf("amqp://%s:%s@127.0.0.1:5672/", user, user), NoDeclare: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			return p.PublishBatch(context.Background(), topic, messages(2)...), -1
		}},
		{"timeout (the call's context ended)", outage, context.DeadlineExceeded, func(t *testing.T) ([]error, int) {
			topic := fanout(t)
			ctx, cancel := context.WithDeadline(context.Background(), time.Now())
			defer cancel()
			return newPublisher(t, amqp.Config{}).PublishBatch(ctx, topic, messages(2)...), -1
		}},
		{"connection lost (cut under the publisher)", outage, nil, func(t *testing.T) ([]error, int) {
			topic := fanout(t)
			addr, cut := proxy(t)
			p, err := amqp.New(amqp.Config{URL: "amqp://guest:guest@" + addr + "/", DialTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			for i, err := range p.PublishBatch(context.Background(), topic, messages(1)...) {
				if err != nil {
					t.Fatalf("before the cut, message %d: %v", i, err)
				}
			}
			cut()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return p.PublishBatch(ctx, topic, messages(2)...), -1
		}},
	} {
		t.Run(row.condition, func(t *testing.T) {
			t.Parallel()
			errs, fail := row.run(t)
			failed := 0
			for i, err := range errs {
				if err == nil {
					continue
				}
				if failed == 0 {
					t.Logf("message %d: %v", i, err) // what this row looks like
				}
				failed++
				switch {
				case row.want == published:
					t.Errorf("message %d: %v, want it published", i, err)
				case (row.want == refused) != errors.Is(err, relay.ErrRejected):
					t.Errorf("message %d: %v, want %v (relay.ErrRejected wrapped: %v)", i, err, row.want, row.want == refused)
				case row.wantErr != nil && !errors.Is(err, row.wantErr):
					t.Errorf("message %d: %v, want it to wrap %v", i, err, row.wantErr)
				}
			}
			if fail < 0 {
				fail = len(errs)
			}
			if failed != fail {
				t.Errorf("%d of %d messages failed, want %d", failed, len(errs), fail)
			}
		})
	}
}

// fanout declares a fanout exchange with a queue bound, both the test's own,
// and returns the exchange.
func fanout(t *testing.T) string {
	topic := name("c")
	topology(t, topic, "fanout", name("c_q"), "", nil)
	return topic
}

// limitedUser adds a RabbitMQ user (its password its name) that may read
// and configure but write nothing on vhost /, deleted when the test ends.
func limitedUser(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		t.Skip("no rabbitmqctl to add a user without write permission")
	}
	user := name("limited")
	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
			t.Skipf("rabbitmqctl %s: %v: %s", args[0], err, out)
		}
	}
	run("add_user", user, user)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, bin, "delete_user", user).Run()
	})
	run("set_permissions", "-p", "/", user, ".*", "^$", ".*")
	return user
}

// proxy forwards a local port to the RabbitMQ server until cut, which closes
// the listener and every connection through it.
func proxy(t *testing.T) (addr string, cut func()) {
	t.Helper()
	target := strings.TrimSuffix(strings.TrimPrefix(url(), "amqp://guest:guest@"), "/")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	var once sync.Once
	cut = func() {
		once.Do(func() {
			_ = l.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				_ = c.Close()
			}
		})
	}
	t.Cleanup(cut)
	return l.Addr().String(), cut
}
