package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/publishers/natsjs"
	"github.com/heraldgo/herald/relay"
)

// verdict is what a row of the contract's table says Herald does with a
// message's failure.
type verdict int

const (
	published verdict = iota // every message acknowledged
	refused                  // each failed message's error wraps relay.ErrRejected: a strike at once
	outage                   // each failed message's error is a plain one: retried, it kills nothing
)

func (v verdict) String() string { return [...]string{"published", "refused", "outage"}[v] }

// apiCode matches a JetStream API error of that code.
type apiCode int

func (c apiCode) match(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.ErrorCode(c)
}

// TestContract runs each row of the table in the package documentation
// ("Whose fault a failure is") against the NATS server here (and a private
// one, for permissions and a lost connection): the condition is produced,
// and every failed message's result must be the row's verdict, matching the
// row's error.
func TestContract(t *testing.T) {
	t.Parallel()
	for _, row := range []struct {
		condition string
		want      verdict
		is        func(error) bool // each failed message's error matches it
		// run produces the condition and returns each message's result, and
		// how many of them must fail (-1: all).
		run func(t *testing.T) ([]error, int)
	}{
		{"too large alone (the server's max_payload)", refused, isErr(nats.ErrMaxPayload), func(t *testing.T) ([]error, int) {
			topic := newTopic(t, "c_maxpayload")
			nc, _ := js(t)
			m := newMessages(1)
			m[0].Payload = make([]byte, nc.MaxPayload()+1)
			return newPublisher(t, natsjs.Config{AutoProvision: true}).PublishBatch(context.Background(), topic, m...), -1
		}},
		{"too large alone (the stream's max_msg_size)", refused, apiCode(10054).match, func(t *testing.T) ([]error, int) {
			topic := stream(t, "c_maxmsgsize", jetstream.StreamConfig{MaxMsgSize: 100})
			m := newMessages(1)
			m[0].Payload = make([]byte, 200)
			return newPublisher(t, natsjs.Config{}).PublishBatch(context.Background(), topic, m...), -1
		}},
		{"too large as a batch", published, nil, func(t *testing.T) ([]error, int) {
			t.Skip("NATS has no batch to refuse: each message is published, and acknowledged or refused, alone")
			return nil, 0
		}},
		{"bad header (metadata that cannot be a NATS header)", refused, isErr(natsjs.ErrBadHeader), func(t *testing.T) ([]error, int) {
			topic := newTopic(t, "c_badheader")
			m := newMessages(1)
			m[0].Metadata.Set("bad key", "v")
			return newPublisher(t, natsjs.Config{AutoProvision: true}).PublishBatch(context.Background(), topic, m...), -1
		}},
		{"expectation not met (Nats-Expected-Stream in the metadata)", refused, apiCode(10060).match, func(t *testing.T) ([]error, int) {
			topic := newTopic(t, "c_expected")
			m := newMessages(1)
			m[0].Metadata.Set(jetstream.ExpectedStreamHeader, "herald_no_such_stream")
			return newPublisher(t, natsjs.Config{AutoProvision: true}).PublishBatch(context.Background(), topic, m...), -1
		}},
		{"invalid subject (a topic with a space)", refused, isErr(nats.ErrBadSubject), func(t *testing.T) ([]error, int) {
			return newPublisher(t, natsjs.Config{}).PublishBatch(context.Background(), "bad topic", newMessages(1)...), -1
		}},
		{"full stream (DiscardNew, max messages)", outage, apiCode(10077).match, func(t *testing.T) ([]error, int) {
			topic := stream(t, "c_fullmsgs", jetstream.StreamConfig{MaxMsgs: 2, Discard: jetstream.DiscardNew})
			return newPublisher(t, natsjs.Config{}).PublishBatch(context.Background(), topic, newMessages(5)...), 3
		}},
		{"full stream (DiscardNew per subject)", outage, apiCode(10077).match, func(t *testing.T) ([]error, int) {
			topic := stream(t, "c_fullsubject", jetstream.StreamConfig{MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true})
			return newPublisher(t, natsjs.Config{}).PublishBatch(context.Background(), topic, newMessages(3)...), 2
		}},
		{"stream missing (unroutable: no stream captures the subject)", outage, isErr(jetstream.ErrNoStreamResponse), func(t *testing.T) ([]error, int) {
			return newPublisher(t, natsjs.Config{}).PublishBatch(context.Background(), newTopic(t, "c_nostream"), newMessages(2)...), -1
		}},
		{"permission denied (the user may not publish to the subject)", outage, nil, func(t *testing.T) ([]error, int) {
			srv, _ := privateServer(t)
			admin, err := nats.Connect(srv, nats.UserInfo("admin", "admin"))
			testkit.Must(t, err)
			t.Cleanup(admin.Close)
			aj, err := jetstream.New(admin)
			testkit.Must(t, err)
			_, err = aj.CreateStream(context.Background(), jetstream.StreamConfig{Name: "forbidden", Subjects: []string{"forbidden.x"}})
			testkit.Must(t, err)
			p := newPublisher(t, natsjs.Config{URL: srv, AckTimeout: 500 * time.Millisecond,
				NATSOptions: []nats.Option{nats.UserInfo("limited", "limited"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}})
			return p.PublishBatch(context.Background(), "forbidden.x", newMessages(2)...), -1
		}},
		{"timeout (no ack within AckTimeout)", outage, isErr(jetstream.ErrAsyncPublishTimeout), func(t *testing.T) ([]error, int) {
			topic := newTopic(t, "c_silent")
			nc, _ := js(t)
			sub, err := nc.Subscribe(topic, func(*nats.Msg) {}) // receives, never answers
			testkit.Must(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			testkit.Must(t, nc.Flush())
			p := newPublisher(t, natsjs.Config{AckTimeout: 200 * time.Millisecond})
			return p.PublishBatch(context.Background(), topic, newMessages(2)...), -1
		}},
		{"connection lost (the server gone)", outage, nil, func(t *testing.T) ([]error, int) {
			srv, stop := privateServer(t)
			p := newPublisher(t, natsjs.Config{URL: srv, AutoProvision: true, AckTimeout: 500 * time.Millisecond,
				NATSOptions: []nats.Option{nats.UserInfo("admin", "admin")}})
			for i, err := range p.PublishBatch(context.Background(), "lost", newMessages(1)...) {
				if err != nil {
					t.Fatalf("before the server went, message %d: %v", i, err)
				}
			}
			stop()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return p.PublishBatch(ctx, "lost", newMessages(2)...), -1
		}},
	} {
		t.Run(row.condition, func(t *testing.T) {
			t.Parallel()
			errs, fail := row.run(t)
			failed := 0
			for i, err := range errs {
				switch {
				case err == nil:
					continue
				case failed == 0:
					t.Logf("message %d: %v", i, err) // what this row looks like
				}
				switch {
				case row.want == published:
					t.Errorf("message %d: %v, want it published", i, err)
				case (row.want == refused) != errors.Is(err, relay.ErrRejected):
					t.Errorf("message %d: %v, want %v (relay.ErrRejected wrapped: %v)", i, err, row.want, row.want == refused)
				case row.is != nil && !row.is(err):
					t.Errorf("message %d: %v, not the row's error", i, err)
				}
				failed++
			}
			if fail < 0 {
				fail = len(errs)
			}
			if row.want != published && failed != fail {
				t.Errorf("%d of %d messages failed, want %d", failed, len(errs), fail)
			}
		})
	}
}

func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// stream creates a stream of the test's own for a new topic, with cfg's
// limits, and returns the topic.
func stream(t *testing.T, prefix string, cfg jetstream.StreamConfig) string {
	t.Helper()
	topic := newTopic(t, prefix)
	cfg.Name, cfg.Subjects = topic, []string{topic}
	_, j := js(t)
	if _, err := j.CreateStream(context.Background(), cfg); err != nil {
		t.Fatalf("create stream %s: %v", topic, err)
	}
	return topic
}

// privateServer starts a nats-server of the test's own, with JetStream, on a
// spare port, and returns its URL and stop, which kills it (by its pid) and
// waits for it; the test's end stops it too. Its account has two users:
// admin may do anything, limited may not publish to forbidden.>.
func privateServer(t *testing.T) (url string, stop func()) {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skip("no nats-server binary on PATH to start a server with users and permissions")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testkit.Must(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	testkit.Must(t, l.Close())
	dir := t.TempDir()
	conf := fmt.Sprintf(`listen: "127.0.0.1:%d"
jetstream { store_dir: %q }
accounts {
  APP {
    jetstream: enabled
    users: [
      { user: admin, password: admin }
      { user: limited, password: limited, permissions: {
          publish: { allow: [">"], deny: ["forbidden.>"] }
          subscribe: { allow: ["_INBOX.>"] } } }
    ]
  }
}
`, port, filepath.Join(dir, "js"))
	path := filepath.Join(dir, "nats.conf")
	testkit.Must(t, os.WriteFile(path, []byte(conf), 0o600))
	cmd := exec.Command(bin, "-c", path)
	testkit.Must(t, cmd.Start())
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	testkit.Eventually(t, 10*time.Second, "private nats-server up", func() bool {
		nc, err := nats.Connect(url, nats.UserInfo("admin", "admin"))
		if err != nil {
			return false
		}
		nc.Close()
		return true
	})
	return url, stop
}

// Issue 30, item 5, through the relay: a stream with DiscardNew and a
// message limit, full (its consumers behind), refuses every message with
// 503 "maximum messages exceeded". That is an outage: no event dies, even
// with MaxAttempts 1, and once the stream has room every event is published.
func TestRelayFullStreamKillsNothing(t *testing.T) {
	t.Parallel()
	topic := stream(t, "relay_full", jetstream.StreamConfig{MaxMsgs: 2, Discard: jetstream.DiscardNew})
	db := testkit.SQLite.OpenNew(t, nil)
	r, err := relay.New(db, newPublisher(t, natsjs.Config{}), relay.Config{Logger: testkit.Quiet(), MaxAttempts: 1,
		PollInterval: 50 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	testkit.Must(t, err)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake,
		Topic: func(*events.Envelope) string { return topic }})))
	testkit.Must(t, db.AutoMigrate(&testkit.Account{}))
	for range 5 {
		a := &testkit.Account{ID: uuid.New()}
		a.Record(testkit.Deposited{AccountID: a.ID})
		testkit.Must(t, db.Create(a).Error)
	}
	testkit.Run(t, r.Run)
	_, j := js(t)
	testkit.Eventually(t, 10*time.Second, "the stream full", func() bool { return streamMsgs(t, j, topic) == 2 })
	time.Sleep(2 * time.Second) // many retries, each refused
	dead, failing := 0, 0
	for _, row := range testkit.Outbox(t, db) {
		if row.Dead {
			dead++
			t.Errorf("event %s dead: %s", row.ID, row.LastError)
		}
		if row.Pending() && row.Attempts > 0 {
			failing++
		}
	}
	if dead > 0 || failing != 3 {
		t.Fatalf("%d dead, %d failing: want none dead, 3 failing", dead, failing)
	}
	// Room in the stream: its limit raised.
	_, err = j.UpdateStream(context.Background(), jetstream.StreamConfig{Name: topic, Subjects: []string{topic}, MaxMsgs: 10, Discard: jetstream.DiscardNew})
	testkit.Must(t, err)
	testkit.Eventually(t, 10*time.Second, "outbox drained", func() bool { return testkit.Pending(t, db) == 0 })
	if n := streamMsgs(t, j, topic); n != 5 {
		t.Fatalf("stream holds %d messages, want 5", n)
	}
}
