package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/publish"
)

// Errors a message's publish can fail with (wrapped, with the broker's reason).
var (
	// ErrNacked is a message RabbitMQ negatively acknowledged (basic.nack):
	// it did not take it (a full queue with overflow reject-publish, an
	// internal error).
	ErrNacked = errors.New("amqp: nacked by the broker")
	// ErrReturned is a message RabbitMQ returned (basic.return): no queue was
	// bound for it, so it was not stored. It is the topology's condition, not
	// the message's: every message to an exchange no queue is bound to comes
	// back, and binding the queue publishes them all. It does not wrap
	// publish.ErrRejected (see "Whose fault a failure is" in the package
	// documentation).
	ErrReturned = errors.New("amqp: returned unroutable by the broker")
	// ErrChannelClosed is a message whose channel or connection closed before
	// its confirm arrived: RabbitMQ may or may not hold it.
	ErrChannelClosed = errors.New("amqp: channel closed before the confirm")
	// ErrClosed is a call on a closed Publisher.
	ErrClosed = errors.New("amqp: publisher closed")
	// ErrTooLarge is a message whose body is larger than the broker takes
	// (RabbitMQ's max_message_size: Config.MaxMessageSize, or the size
	// RabbitMQ stated when it closed a channel for a larger message). It is
	// refused before it is sent, and comes wrapped with publish.ErrRejected.
	ErrTooLarge = errors.New("amqp: message larger than the broker takes")
	// ErrUnframable is a message AMQP 0-9-1 cannot carry: a header name,
	// exchange name or routing key over 255 bytes (a short string), a header
	// value of a type the protocol has no field for, or headers too large for
	// one frame (the content header is never split). It is refused before
	// anything of it is written to the connection, and comes wrapped with
	// publish.ErrRejected.
	ErrUnframable = errors.New("amqp: the message cannot be framed")
)

var _ publish.BatchPublisher = (*Publisher)(nil)

// maxIdleChannels is how many confirm channels a Publisher keeps open between
// calls.
const maxIdleChannels = 16

// Publisher publishes Watermill messages to RabbitMQ with publisher confirms,
// many in flight at once. It is a Watermill message.Publisher and a
// publish.BatchPublisher, safe for concurrent use. Each call uses a channel of
// its own (taken from a pool), so its delivery tags and returns are its own.
type Publisher struct {
	cfg    Config
	log    *slog.Logger
	tokens chan struct{} // one per publish awaiting its confirm (MaxInFlight)
	// learned is the broker's max_message_size, learned from a channel it
	// closed for a larger message (0: not yet).
	learned atomic.Int64

	mu     sync.Mutex
	closed bool
	conn   *connection
	idle   []*channel
}

// connection is one AMQP connection and the exchanges declared on it.
type connection struct {
	conn     *amqp091.Connection
	mu       sync.Mutex
	declared map[string]bool
}

// channel is a confirm-mode channel, used by one call at a time.
type channel struct {
	conn    *connection
	ch      *amqp091.Channel
	returns chan amqp091.Return
	closes  chan *amqp091.Error
	reason  error // why the channel closed, once read from closes
}

// New returns a Publisher for cfg, or the reason cfg is invalid. It does not
// connect: the first call dials, and a call after the connection or its
// channel closed dials or opens again, so a broker down when New runs is not
// an error.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Publisher{cfg: cfg, log: cfg.Logger, tokens: make(chan struct{}, cfg.MaxInFlight)}, nil
}

// Publish publishes msgs to topic's exchange and returns when RabbitMQ has
// confirmed every one (nil), or with the failures of those it did not
// (errors.Join of them). It waits without a deadline (a dead connection
// ends with the missed heartbeats); PublishBatch takes a context. It
// implements Watermill's message.Publisher.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return errors.Join(p.PublishBatch(context.Background(), topic, msgs...)...)
}

// PublishBatch publishes msgs to topic's exchange, pipelined (up to
// MaxInFlight unconfirmed), and returns one error per message, in the order
// of msgs: nil when RabbitMQ confirmed it (basic.ack) without returning it;
// ErrNacked, ErrReturned or ErrChannelClosed (wrapped) when not; the
// context's error, wrapped, for a message unconfirmed when ctx ended;
// ErrUnframable, wrapping publish.ErrRejected, for a message AMQP cannot
// carry, which is never sent. Every message is published mandatory, so an
// unroutable one is a failure. One message's failure does not fail the
// others. It implements publish.BatchPublisher.
func (p *Publisher) PublishBatch(ctx context.Context, topic string, msgs ...*message.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	exchange := p.cfg.Exchange(topic)
	if err := checkExchange(exchange); err != nil {
		fill(errs, classify(err)) // not even declared: the name cannot be framed
		return errs
	}
	c, err := p.channel()
	if err != nil {
		fill(errs, classify(err))
		return errs
	}
	if err := p.declare(c, exchange); err != nil {
		p.discard(c)
		fill(errs, classify(err))
		return errs
	}
	switch p.run(ctx, c, exchange, topic, msgs, errs) {
	case reusable:
		p.release(c)
	case broken:
		p.discard(c)
	case abandoned:
		// Closed before returning: RabbitMQ handles a channel's frames in
		// order, so once the close is acknowledged no publish of this call is
		// still on its way to a queue, behind a retry of the same message
		// the relay sends on another channel.
		if err := c.ch.Close(); err != nil && !errors.Is(err, amqp091.ErrClosed) {
			p.log.Debug("amqp: close channel", "error", err)
		}
	}
	return errs
}

// Close closes the connection; calls in progress fail with ErrChannelClosed
// and later calls with ErrClosed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.idle = nil
	if p.conn == nil {
		return nil
	}
	err := p.conn.conn.Close()
	p.conn = nil
	if err != nil && !errors.Is(err, amqp091.ErrClosed) {
		return fmt.Errorf("amqp: close connection: %w", err)
	}
	return nil
}

// outstanding is a message published and not yet confirmed.
type outstanding struct {
	idx      int
	dc       *amqp091.DeferredConfirmation
	returned *amqp091.Return
}

// ending is how a call left its channel.
type ending int

const (
	reusable  ending = iota // every publish settled, the channel open
	broken                  // the channel closed
	abandoned               // the context ended with publishes unconfirmed
)

// run publishes msgs on c and writes each one's result in errs.
func (p *Publisher) run(ctx context.Context, c *channel, exchange, topic string, msgs []*message.Message, errs []error) ending {
	var (
		window []*outstanding                // in publishing order
		byUUID = map[string][]*outstanding{} // for matching returns
		next   int
		closed bool // c can take no more publishes
	)
	// record marks the messages a return is for.
	record := func(r amqp091.Return) {
		id, _ := r.Headers[p.cfg.UUIDHeader].(string)
		// Messages of one call with the same UUID cannot be told apart: each
		// is counted as returned (a failure, retried), never as a success it
		// might not be.
		for _, o := range byUUID[id] {
			o.returned = &r
		}
		if len(byUUID[id]) == 0 {
			p.log.Warn("amqp: a return matches no message awaiting its confirm", "exchange", r.Exchange, "uuid", id)
		}
	}
	// drain records the returns received: RabbitMQ sends a message's
	// basic.return before its basic.ack, and amqp091 hands them over in that
	// order from one goroutine, so a return is in c.returns before its
	// confirmation is done. c.returns has room for a return per message in
	// flight, so amqp091 never waits on it (nor drops one).
	drain := func() {
		for {
			select {
			case r, ok := <-c.returns:
				if !ok {
					return
				}
				record(r)
			default:
				return
			}
		}
	}
	settle := func(o *outstanding) {
		<-p.tokens
		window = window[1:]
		list := byUUID[msgs[o.idx].UUID]
		for i, x := range list {
			if x == o {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(byUUID, msgs[o.idx].UUID)
		} else {
			byUUID[msgs[o.idx].UUID] = list
		}
		switch {
		case o.returned != nil:
			errs[o.idx] = classify(fmt.Errorf("%w: exchange %q routing key %q: %d %s", ErrReturned, o.returned.Exchange, o.returned.RoutingKey, o.returned.ReplyCode, o.returned.ReplyText))
		case o.dc.Acked():
			errs[o.idx] = nil
		case c.ch.IsClosed():
			errs[o.idx] = classify(p.closedFor(c, msgs[o.idx]))
		default:
			errs[o.idx] = classify(fmt.Errorf("%w: exchange %q", ErrNacked, exchange))
		}
	}
	publish := func() {
		// A token is held for msgs[next].
		i := next
		next++
		msg := msgs[i]
		key, pub := p.cfg.RoutingKey(topic, msg), p.marshal(msg)
		if err := checkFrames(exchange, key, pub, c.conn.conn.Config.FrameSize, p.maxBody()); err != nil {
			<-p.tokens
			errs[i] = classify(fmt.Errorf("amqp: message %s: %w", msg.UUID, err))
			return
		}
		dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, pub)
		if err != nil || dc == nil {
			<-p.tokens
			if err == nil {
				err = errors.New("channel not in confirm mode")
			}
			if c.ch.IsClosed() {
				// This message and the rest of the call fail at once.
				closed = true
				for ; i < len(msgs); i++ {
					errs[i] = classify(p.closedFor(c, msgs[i]))
				}
				next = len(msgs)
				return
			}
			errs[i] = classify(fmt.Errorf("amqp: publish to %q: %w", exchange, err))
			return
		}
		o := &outstanding{idx: i, dc: dc}
		window = append(window, o)
		byUUID[msg.UUID] = append(byUUID[msg.UUID], o)
	}
	returns := c.returns
	for next < len(msgs) || len(window) > 0 {
		var tokens chan struct{}
		if next < len(msgs) {
			tokens = p.tokens
		}
		var oldest <-chan struct{}
		if len(window) > 0 {
			oldest = window[0].dc.Done()
		}
		select {
		case tokens <- struct{}{}:
			publish()
		case r, ok := <-returns:
			if !ok {
				returns = nil // closed with the channel
				continue
			}
			record(r)
		case <-oldest:
			drain()
			settle(window[0])
		case <-ctx.Done():
			err := classify(fmt.Errorf("amqp: publish to %q: %w", exchange, ctx.Err()))
			for _, o := range window {
				<-p.tokens
				errs[o.idx] = err
			}
			for ; next < len(msgs); next++ {
				errs[next] = err
			}
			return abandoned
		}
	}
	if closed || c.ch.IsClosed() {
		return broken
	}
	return reusable
}

// closedErr is the failure of a message whose channel c closed.
func (p *Publisher) closedErr(c *channel) error {
	if c.reason != nil {
		return c.reason
	}
	select {
	case e, ok := <-c.closes:
		if ok && e != nil {
			c.reason = fmt.Errorf("%w: %w", ErrChannelClosed, e)
			return c.reason
		}
	default:
	}
	return ErrChannelClosed
}

// marshal encodes msg as watermill-amqp's DefaultMarshaler does: the payload
// as the body, the metadata as string headers plus the UUID header,
// persistent delivery mode.
func (p *Publisher) marshal(msg *message.Message) amqp091.Publishing {
	headers := make(amqp091.Table, len(msg.Metadata)+1)
	for k, v := range msg.Metadata {
		headers[k] = v
	}
	headers[p.cfg.UUIDHeader] = msg.UUID
	return amqp091.Publishing{Body: msg.Payload, Headers: headers, DeliveryMode: amqp091.Persistent}
}

// channel returns an idle channel of the current connection, or a new one,
// dialing when there is no open connection.
func (p *Publisher) channel() (*channel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if p.conn == nil || p.conn.conn.IsClosed() {
		p.idle = nil
		conn, err := p.dial()
		if err != nil {
			return nil, err
		}
		p.conn = conn
	}
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if c.conn == p.conn && !c.ch.IsClosed() {
			return c, nil
		}
	}
	ch, err := p.conn.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: confirm mode: %w", err)
	}
	c := &channel{conn: p.conn, ch: ch,
		// Room for a return per message in flight: amqp091 drops a
		// notification it cannot deliver within 5 s.
		returns: ch.NotifyReturn(make(chan amqp091.Return, p.cfg.MaxInFlight)),
		closes:  ch.NotifyClose(make(chan *amqp091.Error, 1)),
	}
	return c, nil
}

// dial opens a connection. p.mu is held.
func (p *Publisher) dial() (*connection, error) {
	conn, err := amqp091.DialConfig(p.cfg.URL, amqp091.Config{
		Dial:            amqp091.DefaultDial(p.cfg.DialTimeout),
		TLSClientConfig: p.cfg.TLS,
		Properties:      amqp091.Table{"connection_name": "herald"},
	})
	if err != nil {
		return nil, fmt.Errorf("amqp: dial: %w", err)
	}
	closes := conn.NotifyClose(make(chan *amqp091.Error, 1))
	go func() {
		if e, ok := <-closes; ok && e != nil {
			p.log.Warn("amqp: connection closed", "error", e)
		}
	}()
	p.log.Info("amqp: connected", "local", conn.LocalAddr().String())
	return &connection{conn: conn, declared: map[string]bool{}}, nil
}

// declare declares exchange on c once per connection (unless NoDeclare).
func (p *Publisher) declare(c *channel, exchange string) error {
	if p.cfg.NoDeclare || exchange == "" {
		return nil
	}
	c.conn.mu.Lock()
	done := c.conn.declared[exchange]
	c.conn.mu.Unlock()
	if done {
		return nil
	}
	if err := c.ch.ExchangeDeclare(exchange, p.cfg.ExchangeType, true, false, false, false, nil); err != nil {
		return fmt.Errorf("amqp: declare exchange %q: %w", exchange, err)
	}
	c.conn.mu.Lock()
	c.conn.declared[exchange] = true
	c.conn.mu.Unlock()
	return nil
}

// release puts c back in the pool.
func (p *Publisher) release(c *channel) {
	p.mu.Lock()
	if !p.closed && c.conn == p.conn && len(p.idle) < maxIdleChannels {
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.discard(c)
}

// discard closes c in the background: a call that gave up on c returns at
// once.
func (p *Publisher) discard(c *channel) {
	go func() {
		if err := c.ch.Close(); err != nil && !errors.Is(err, amqp091.ErrClosed) {
			p.log.Debug("amqp: close channel", "error", err)
		}
	}()
}

// fill sets every error of errs to err.
func fill(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}
