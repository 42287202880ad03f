package natsjs

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of Config.
const (
	// DefaultMaxInFlight is Config.MaxInFlight's default.
	DefaultMaxInFlight = 1024
	// DefaultAckTimeout is Config.AckTimeout's default.
	DefaultAckTimeout = 5 * time.Second
)

// Config configures a Publisher. A zero field takes its default; New fails on
// a configuration Validate refuses.
type Config struct {
	// URL is the NATS server New connects to (several, comma-separated, for a
	// cluster), used only when Conn is nil; then it is Required.
	URL string

	// Conn is an existing connection to publish on, instead of one New opens
	// to URL. The Publisher does not close it. Defaults to nil: New connects
	// to URL.
	Conn *nats.Conn

	// NATSOptions are options of the connection New opens to URL, applied
	// after Herald's own (reconnect forever, every 250ms: a relay's
	// connection must never give up). Defaults to none.
	NATSOptions []nats.Option

	// MaxInFlight bounds the messages published and not yet acknowledged,
	// over every call of the Publisher: a publish waits for a free slot.
	// Defaults to DefaultMaxInFlight (1024).
	MaxInFlight int

	// AckTimeout is how long a message waits for its acknowledgement before
	// it fails (it may still have been stored: published again, JetStream's
	// duplicate window drops the copy). Keep it below the relay's
	// PublishTimeout. Defaults to DefaultAckTimeout (5s).
	AckTimeout time.Duration

	// AutoProvision creates, on a topic's first publish, the stream
	// StreamConfig returns for it when no stream of that name exists, as
	// watermill-nats' JetStream AutoProvision does. Defaults to false: the
	// streams must exist.
	AutoProvision bool

	// StreamConfig is the stream AutoProvision creates for a topic. Defaults
	// to DefaultStreamConfig, watermill-nats' stream.
	StreamConfig func(topic string) jetstream.StreamConfig

	// Logger receives the Publisher's log lines. Defaults to slog.Default().
	Logger *slog.Logger
}

// DefaultStreamConfig is the stream watermill-nats' publisher and subscriber
// provision for topic: named after it, with the topic as its only subject,
// and the server's defaults otherwise (file storage, limits retention, a
// two-minute duplicate window). A stream name allows no '.', '*', '>',
// space or path separator: each is replaced by '_' (watermill-nats would
// fail to create the stream; its subscribers without AutoProvision find it
// by its subject).
func DefaultStreamConfig(topic string) jetstream.StreamConfig {
	name := strings.Map(func(r rune) rune {
		switch r {
		case '.', '*', '>', ' ', '\t', '/', '\\':
			return '_'
		}
		return r
	}, topic)
	return jetstream.StreamConfig{Name: name, Subjects: []string{topic}}
}

func (c *Config) setDefaults() {
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.StreamConfig == nil {
		c.StreamConfig = DefaultStreamConfig
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports what is wrong with c, its defaults applied: every problem,
// joined.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("natsjs: "+format, args...))
		}
	}
	check(c.URL != "" || c.Conn != nil, "one of URL and Conn is required")
	check(c.URL == "" || c.Conn == nil, "URL and Conn are both set: set one")
	check(c.MaxInFlight > 0, "MaxInFlight is %d, must be positive", c.MaxInFlight)
	check(c.AckTimeout > 0, "AckTimeout is %v, must be positive", c.AckTimeout)
	return errors.Join(errs...)
}
