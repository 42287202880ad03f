package amqp

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/heraldgo/herald/publish"
)

// classify decides what a message's failed publish is, by the one rule of
// the package documentation ("Whose fault a failure is"): the message's own
// refusal (the error returned wraps publish.ErrRejected: a strike at once), or
// the broker's condition (a plain error: retried, it kills nothing). Only a
// message AMQP cannot carry (ErrUnframable) or larger than the broker takes
// (ErrTooLarge) is its own: RabbitMQ answers
// every other failure for a queue, an exchange, a channel or a connection,
// never for one message (a full queue nacks every message, no queue bound
// returns every message, a permission or a missing exchange closes the
// channel). Every publish path calls it; nil stays nil.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrUnframable) || errors.Is(err, ErrTooLarge) {
		return fmt.Errorf("%w: %w", publish.ErrRejected, err)
	}
	return err
}

// shortstrMax is the longest AMQP short string: exchange names, routing keys
// and header (field table) names.
const shortstrMax = 255

// frameOverhead is a frame's bytes around its payload: type, channel, size,
// frame-end.
const frameOverhead = 8

// checkExchange reports, as ErrUnframable, an exchange name AMQP cannot
// carry.
func checkExchange(exchange string) error {
	if len(exchange) > shortstrMax {
		return fmt.Errorf("%w: exchange name of %d bytes, over %d", ErrUnframable, len(exchange), shortstrMax)
	}
	return nil
}

// checkFrames reports, as ErrUnframable, what of a publish to exchange with
// routing key key AMQP 0-9-1 cannot carry, before any of it is written: a
// connection's frames are one stream, and amqp091 fails a frame in the
// middle of writing it, which breaks the connection under every message of
// every call on it. frameMax is the connection's negotiated frame_max (0: no
// limit): the content header frame, which carries the headers, is never
// split.
func checkFrames(exchange, key string, pub amqp091.Publishing, frameMax, maxBody int) error {
	if err := checkExchange(exchange); err != nil {
		return err
	}
	if maxBody > 0 && len(pub.Body) > maxBody {
		return fmt.Errorf("%w: body of %d bytes, over the broker's max_message_size of %d", ErrTooLarge, len(pub.Body), maxBody)
	}
	if len(key) > shortstrMax {
		return fmt.Errorf("%w: routing key of %d bytes, over %d", ErrUnframable, len(key), shortstrMax)
	}
	size := 14 // content header payload: class, weight, body size, property flags
	if len(pub.Headers) > 0 {
		size += 4 // the table's length
		for k, v := range pub.Headers {
			if len(k) > shortstrMax {
				return fmt.Errorf("%w: header name of %d bytes, over %d: %.40q (cut)", ErrUnframable, len(k), shortstrMax, k)
			}
			s, ok := v.(string)
			if !ok {
				// The publisher writes strings only; any other value is
				// checked as amqp091 would encode it.
				if err := (amqp091.Table{k: v}).Validate(); err != nil {
					return fmt.Errorf("%w: header %q: %w", ErrUnframable, k, err)
				}
				continue
			}
			size += 1 + len(k) + 1 + 4 + len(s) // name, type 'S', long string
		}
	}
	if pub.DeliveryMode > 0 {
		size++
	}
	if frameMax > 0 && size+frameOverhead > frameMax {
		return fmt.Errorf("%w: headers of %d bytes, over the connection's frame_max of %d (a content header is one frame)",
			ErrUnframable, size+frameOverhead, frameMax)
	}
	return nil
}

// maxBody is the largest body the broker takes, as far as the publisher
// knows (0: no limit known): Config.MaxMessageSize, or what RabbitMQ stated
// when it closed a channel for a larger message, whichever is smaller.
func (p *Publisher) maxBody() int {
	limit, learned := p.cfg.MaxMessageSize, int(p.learned.Load())
	if limit == 0 || (learned > 0 && learned < limit) {
		return learned
	}
	return limit
}

// tooLargeReason is RabbitMQ's reason for closing a channel on a message
// over its max_message_size (406 PRECONDITION_FAILED).
var tooLargeReason = regexp.MustCompile(`message size (\d+) is larger than configured max size (\d+)`)

// closedFor is the failure of m, unconfirmed when its channel c closed: m's
// own (ErrTooLarge) when RabbitMQ closed the channel for a message over its
// max_message_size and m's body is over it (the limit is learned for the
// next calls); else the channel's closing, the broker's condition.
func (p *Publisher) closedFor(c *channel, m *message.Message) error {
	err := p.closedErr(c)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed {
		return err
	}
	sub := tooLargeReason.FindStringSubmatch(ae.Reason)
	if sub == nil {
		return err
	}
	limit, perr := strconv.Atoi(sub[2])
	if perr != nil || limit <= 0 {
		return err
	}
	if old := p.learned.Load(); old == 0 || int64(limit) < old {
		p.learned.Store(int64(limit))
	}
	if len(m.Payload) > limit {
		return fmt.Errorf("%w: message %s: body of %d bytes, over the broker's max_message_size of %d: %w", ErrTooLarge, m.UUID, len(m.Payload), limit, err)
	}
	return err
}
