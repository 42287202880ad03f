package amqp

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// DefaultUUIDHeader is the header that carries the message UUID, as
// watermill-amqp's DefaultMarshaler writes and reads it.
const DefaultUUIDHeader = "_watermill_message_uuid"

// DefaultMaxInFlight is the default bound of publishes awaiting their confirm.
const DefaultMaxInFlight = 1024

// Config configures a Publisher. The zero value of every field but URL is a
// default; the defaults match watermill-amqp v3's durable pub/sub config
// (amqp.NewDurablePubSubConfig): a durable fanout exchange named after the
// topic, an empty routing key, persistent messages, the UUID in the
// "_watermill_message_uuid" header.
type Config struct {
	// URL is the RabbitMQ URL, amqp://user:pass@host:port/vhost (or amqps://).
	// Required.
	URL string

	// Exchange names the exchange a topic's messages are published to.
	// Defaults to the topic itself (watermill-amqp's
	// GenerateExchangeNameTopicName).
	Exchange func(topic string) string

	// ExchangeType is the type the exchanges are declared with ("fanout",
	// "direct", "topic", "headers"). Defaults to "fanout".
	ExchangeType string

	// NoDeclare, when true, publishes to exchanges that must already exist;
	// publishing to a missing one fails the call's messages. Defaults to
	// false: each exchange is declared durable, of ExchangeType, on its first
	// use on a connection (as watermill-amqp's publisher does).
	NoDeclare bool

	// RoutingKey is the routing key of one message. Defaults to "" for every
	// message (what NewDurablePubSubConfig publishes with; a fanout exchange
	// ignores it).
	RoutingKey func(topic string, msg *message.Message) string

	// UUIDHeader is the header the message UUID is written to. Defaults to
	// DefaultUUIDHeader ("_watermill_message_uuid", watermill-amqp's
	// DefaultMessageUUIDHeaderKey).
	UUIDHeader string

	// MaxInFlight bounds the publishes sent and not yet confirmed by
	// RabbitMQ, over all calls of the Publisher. Defaults to
	// DefaultMaxInFlight (1024).
	MaxInFlight int

	// MaxMessageSize is the largest body RabbitMQ takes: its
	// max_message_size (128 MiB by default in RabbitMQ 3.8 to 3.13, 16 MiB
	// in 4.0 and later). A larger message is refused alone (ErrTooLarge,
	// wrapping publish.ErrRejected) before it is sent: sent, RabbitMQ would
	// close the call's channel, failing its neighbours too. Defaults to 0:
	// learned from the first channel RabbitMQ closes for a larger message
	// (its neighbours in that call fail once, as an outage; the larger one
	// is refused).
	MaxMessageSize int

	// DialTimeout bounds dialing and the AMQP handshake. Defaults to 10s.
	DialTimeout time.Duration

	// TLS is the TLS configuration of amqps URLs. Defaults to nil: an empty
	// tls.Config with the URL's host as ServerName.
	TLS *tls.Config

	// Logger receives the connection's events (dials, closed connections and
	// channels). Defaults to slog.Default().
	Logger *slog.Logger
}

// setDefaults fills the zero fields with their defaults.
func (c *Config) setDefaults() {
	if c.Exchange == nil {
		c.Exchange = func(topic string) string { return topic }
	}
	if c.ExchangeType == "" {
		c.ExchangeType = "fanout"
	}
	if c.RoutingKey == nil {
		c.RoutingKey = func(string, *message.Message) string { return "" }
	}
	if c.UUIDHeader == "" {
		c.UUIDHeader = DefaultUUIDHeader
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports what is wrong with c once its defaults are applied; New
// fails with it.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("URL is required"))
	} else if _, err := amqp091.ParseURI(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("URL: %w", err))
	}
	if c.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("MaxInFlight is %d, below 0", c.MaxInFlight))
	}
	if c.MaxMessageSize < 0 {
		errs = append(errs, fmt.Errorf("MaxMessageSize is %d, below 0", c.MaxMessageSize))
	}
	if len(c.UUIDHeader) > shortstrMax {
		errs = append(errs, fmt.Errorf("UUIDHeader is %d bytes, over AMQP's %d", len(c.UUIDHeader), shortstrMax))
	}
	if c.DialTimeout < 0 {
		errs = append(errs, fmt.Errorf("DialTimeout is %v, below 0", c.DialTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("amqp: invalid config: %w", err)
	}
	return nil
}
