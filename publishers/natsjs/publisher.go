package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heraldgo/herald/publish"
)

// WatermillUUIDHeader is the header the message UUID travels in: the one
// watermill-nats' NATSMarshaler writes and reads.
const WatermillUUIDHeader = "_watermill_message_uuid"

// Errors a publish can fail with.
var (
	// ErrClosed is a publish on a closed Publisher.
	ErrClosed = errors.New("natsjs: publisher closed")
	// ErrBadHeader is a message whose metadata cannot travel as NATS headers:
	// an empty key, a key with a colon, a space or a control character, or a
	// value with a line break.
	ErrBadHeader = errors.New("natsjs: metadata cannot be a NATS header")
)

var _ publish.BatchPublisher = (*Publisher)(nil)

// HeaderAllowance is what MaxPayloadBytes leaves, of the server's
// max_payload, for a message's headers: 69,632 bytes (68 KiB), room for the
// most metadata the write path accepts (outboxhook.MaxMetadataBytes, 65,535
// bytes as JSON, which take no more as NATS headers), Herald's own keys at
// their longest, the message UUID and Nats-Msg-Id.
const HeaderAllowance = 68 << 10

// Publisher publishes Watermill messages to NATS JetStream, pipelined: up to
// Config.MaxInFlight messages are on their way at once, each acknowledged
// (stored) by JetStream on its own. It is a Watermill message.Publisher and
// a publish.BatchPublisher, safe for concurrent use.
type Publisher struct {
	cfg   Config
	log   *slog.Logger
	nc    *nats.Conn
	own   bool // nc was opened by New: Close closes it
	js    jetstream.JetStream
	slots chan struct{} // one token per message in flight

	mu     sync.Mutex
	closed bool
	calls  sync.WaitGroup // calls in progress, and their late acks

	smu     sync.Mutex
	streams map[string]bool // topics whose stream is provisioned
}

// New returns a Publisher configured by cfg, connected to cfg.URL unless
// cfg.Conn is set. A configuration Validate refuses fails here.
func New(cfg Config) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, log: cfg.Logger, nc: cfg.Conn, slots: make(chan struct{}, cfg.MaxInFlight), streams: map[string]bool{}}
	if p.nc == nil {
		opts := append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}, cfg.NATSOptions...)
		nc, err := nats.Connect(cfg.URL, opts...)
		if err != nil {
			return nil, fmt.Errorf("natsjs: connect to %s: %w", cfg.URL, err)
		}
		p.nc, p.own = nc, true
	}
	js, err := jetstream.New(p.nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxInFlight),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout))
	if err != nil {
		p.closeConn()
		return nil, fmt.Errorf("natsjs: jetstream: %w", err)
	}
	p.js = js
	return p, nil
}

// Publish publishes msgs to topic (the NATS subject), pipelined, and returns
// once each is acknowledged or failed: nil when JetStream stored every one,
// else the failures joined. A failed message does not stop the others, which
// may be stored after it: publish one message per call where a later message
// must never be stored without an earlier one (Herald's relay, through
// PublishBatch, never sends two events of one aggregate in one call in
// ordered mode). Each message waits at most Config.AckTimeout for its ack.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return errors.Join(p.PublishBatch(context.Background(), topic, msgs...)...)
}

// PublishBatch publishes msgs to topic (the NATS subject), pipelined, and
// returns one error per message, in the order of msgs: nil when JetStream
// acknowledged it. A message that fails (too large, refused by its stream,
// no ack within Config.AckTimeout) fails alone; its error wraps
// publish.ErrRejected only when the failure is its own (see "Whose fault a
// failure is" in the package documentation): a full stream is not. Each message carries its
// UUID and metadata in headers as watermill-nats' NATSMarshaler writes them,
// and its UUID as Nats-Msg-Id, so the stream's duplicate window drops a copy
// published again. When ctx is done, the messages not yet acknowledged fail
// with its error (they may still be stored) and those not yet sent are not
// sent.
func (p *Publisher) PublishBatch(ctx context.Context, topic string, msgs ...*message.Message) []error {
	errs := make([]error, len(msgs))
	if !p.enter() {
		fill(errs, ErrClosed)
		return errs
	}
	defer p.calls.Done()
	if !validSubject(topic) {
		// Never sent, and no stream can be made for it: every message to
		// it fails alike, for ever.
		fill(errs, classify(fmt.Errorf("natsjs: topic %q: %w", topic, nats.ErrBadSubject)))
		return errs
	}
	if err := p.ensureStream(ctx, topic); err != nil {
		fill(errs, classify(err))
		return errs
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	sent := make(chan int, len(msgs))
	go func() {
		defer close(sent)
		for i, m := range msgs {
			nm, err := NATSMessage(topic, m)
			if err != nil {
				errs[i] = classify(err)
				continue
			}
			if err := p.acquire(ctx); err != nil {
				for j := i; j < len(msgs); j++ {
					errs[j] = classify(fmt.Errorf("natsjs: message %s not sent: %w", msgs[j].UUID, err))
				}
				return
			}
			f, err := p.js.PublishMsgAsync(nm)
			if err != nil {
				p.release()
				if errors.Is(err, nats.ErrMaxPayload) {
					err = fmt.Errorf("payload of %d bytes with its headers over the server's max_payload (%d bytes): "+
						"set outboxhook.Config.MaxPayloadBytes to at most %d (Publisher.MaxPayloadBytes), or raise max_payload: %w",
						len(m.Payload), p.nc.MaxPayload(), p.MaxPayloadBytes(), err)
				}
				errs[i] = classify(fmt.Errorf("natsjs: publish message %s: %w", m.UUID, err))
				continue
			}
			futures[i] = f
			sent <- i
		}
	}()
	var late []jetstream.PubAckFuture
	for i := range sent {
		f := futures[i]
		select {
		case <-f.Ok():
			p.release()
		case err := <-f.Err():
			p.release()
			errs[i] = p.failed(topic, msgs[i], err)
		case <-ctx.Done():
			errs[i] = classify(fmt.Errorf("natsjs: message %s not acknowledged in time: %w", msgs[i].UUID, ctx.Err()))
			late = append(late, f)
		}
	}
	if len(late) > 0 {
		p.calls.Add(1)
		go p.settle(late)
	}
	return errs
}

// settle waits for the acks of late, the futures of a call that returned
// before they came, and frees their slots: the window counts them until then.
// Each resolves within AckTimeout.
func (p *Publisher) settle(late []jetstream.PubAckFuture) {
	defer p.calls.Done()
	for _, f := range late {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			p.log.Debug("natsjs: late message not acknowledged", "error", err)
		}
		p.release()
	}
}

// failed is the error of a message JetStream did not acknowledge, as
// classify decides it. No responders means no stream captures topic: it is
// provisioned again on the next call, if AutoProvision is set.
func (p *Publisher) failed(topic string, m *message.Message, err error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		p.smu.Lock()
		delete(p.streams, topic)
		p.smu.Unlock()
	}
	err = classify(fmt.Errorf("natsjs: message %s: %w", m.UUID, err))
	p.log.Debug("natsjs: message not acknowledged", "topic", topic, "message_uuid", m.UUID, "error", err)
	return err
}

// NATSMessage is the NATS message Publisher sends for m on topic: the payload
// as it is; headers as watermill-nats' NATSMarshaler writes them (the UUID in
// WatermillUUIDHeader, each metadata entry as a header), and the UUID as
// Nats-Msg-Id, which NATSMarshaler's Unmarshal skips.
func NATSMessage(topic string, m *message.Message) (*nats.Msg, error) {
	h := make(nats.Header, len(m.Metadata)+2)
	h.Set(WatermillUUIDHeader, m.UUID)
	for k, v := range m.Metadata {
		if !validKey(k) || strings.IndexByte(v, '\n') >= 0 || strings.IndexByte(v, '\r') >= 0 { // not ContainsAny: a set built per call
			return nil, fmt.Errorf("%w: message %s: key %q", ErrBadHeader, m.UUID, k)
		}
		h.Set(k, v)
	}
	if m.UUID != "" {
		h.Set(nats.MsgIdHdr, m.UUID)
	}
	return &nats.Msg{Subject: topic, Data: m.Payload, Header: h}, nil
}

// MaxPayloadBytes is the largest payload the Publisher can publish with the
// most metadata the write path accepts: the server's max_payload (which
// bounds a message's payload and headers together: 1 MiB by default, of
// which outboxhook.DefaultMaxPayloadBytes leaves HeaderAllowance) less
// HeaderAllowance. Set
// outboxhook.Config.MaxPayloadBytes to it, or less, so that the write path
// refuses at save what the server would refuse at every publish (a message
// over max_payload wraps publish.ErrRejected: it dies after MaxAttempts). It
// is 0 if max_payload is smaller than HeaderAllowance, and as of the
// connection's latest server.
func (p *Publisher) MaxPayloadBytes() int {
	return max(int(p.nc.MaxPayload())-HeaderAllowance, 0)
}

// validSubject reports whether topic can be the subject of a published
// message: not empty, no whitespace or control character, no empty token
// (a leading, trailing or doubled '.'), no wildcard token ('*', '>').
func validSubject(topic string) bool {
	if topic == "" {
		return false
	}
	for _, c := range []byte(topic) {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	for tok := range strings.SplitSeq(topic, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	return true
}

// validKey reports whether k can be a NATS header key.
func validKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range []byte(k) {
		if c <= ' ' || c == ':' || c == 0x7f {
			return false
		}
	}
	return true
}

// ensureStream provisions topic's stream once, when AutoProvision is set:
// it creates Config.StreamConfig(topic) if no stream of that name exists and
// no other stream captures its subjects.
func (p *Publisher) ensureStream(ctx context.Context, topic string) error {
	if !p.cfg.AutoProvision {
		return nil
	}
	p.smu.Lock()
	defer p.smu.Unlock()
	if p.streams[topic] {
		return nil
	}
	if err := provisionStream(ctx, p.js, p.cfg.StreamConfig(topic), p.log); err != nil {
		return err
	}
	p.streams[topic] = true
	return nil
}

// provisionStream creates the stream sc unless a stream of its name exists or
// another stream captures its subjects (API error 10065): the stream
// Publisher and Subscriber provision for a topic.
func provisionStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, log *slog.Logger) error {
	if _, err := js.Stream(ctx, sc.Name); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("natsjs: look up stream %q: %w", sc.Name, err)
	}
	_, err := js.CreateStream(ctx, sc)
	var api *jetstream.APIError
	switch {
	case err == nil:
		log.Info("natsjs: stream created", "stream", sc.Name, "subjects", sc.Subjects)
	case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
	case errors.As(err, &api) && api.ErrorCode == codeSubjectOverlap:
		// The topic (a literal subject) is one an existing stream's
		// subjects capture: that stream stores what is published to it.
		log.Info("natsjs: stream not created: another stream captures its subjects", "stream", sc.Name, "subjects", sc.Subjects)
	default:
		return fmt.Errorf("natsjs: create stream %q: %w", sc.Name, err)
	}
	return nil
}

// acquire takes a slot of the window, or fails when ctx is done first.
func (p *Publisher) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Publisher) release() { <-p.slots }

// enter counts a call in, unless the Publisher is closed.
func (p *Publisher) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.calls.Add(1)
	return true
}

// Close stops the Publisher: later publishes fail with ErrClosed. It waits
// for the calls in progress and the acks still awaited (each within
// AckTimeout), then closes the connection if New opened it.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.calls.Wait()
	p.closeConn()
	return nil
}

func (p *Publisher) closeConn() {
	if p.own {
		p.nc.Close()
	}
}

func fill(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}
