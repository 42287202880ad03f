package kafka_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/publishers/kafka"
	"github.com/heraldgo/herald/relay"
)

// With every default (the publisher's, the write path's, the topic's), an
// event the write path accepted is published: a payload over franz-go's own
// default batch limit (1,000,012 bytes) but within the topic's
// max.message.bytes (1,048,588) is the brokers' to take, and they take it.
func TestDefaultsPublishWhatTheWritePathAccepts(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	pub := newPublisher(t, c)
	for i, err := range publish(t, pub, "orders", sized("a", 0, 1_010_000), msg("b", 0)) {
		if err != nil {
			t.Fatalf("record %d: %v, want it published", i, err)
		}
	}
	consumeDistinct(t, c, "orders", 2, 10*time.Second)
}

// The write path's default payload limit leaves room for the headers under
// the topic's default max.message.bytes: a payload at that limit with the
// most metadata the save accepts is published with every default.
func TestDefaultPayloadLimitWithMostMetadataFitsTheDefaultTopic(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "orders")
	m := sized("a", 0, outboxhook.DefaultMaxPayloadBytes)
	for i := range 60 { // about outboxhook.MaxMetadataBytes as JSON
		m.Metadata.Set("k"+strconv.Itoa(i), strings.Repeat("v", 1000))
	}
	for i, err := range publish(t, newPublisher(t, c), "orders", m) {
		if err != nil {
			t.Fatalf("record %d: %v, want it published", i, err)
		}
	}
}

// A topic set to take the write path's largest default payload takes it: the
// publisher's own limit is no lower than outboxhook.DefaultMaxPayloadBytes
// with its metadata.
func TestPayloadAtTheWritePathLimitFitsALargerTopic(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	createTopic(t, c, "big", 1, map[string]string{"max.message.bytes": "2097152"})
	pub := newPublisher(t, c)
	for i, err := range publish(t, pub, "big", sized("a", 0, outboxhook.DefaultMaxPayloadBytes)) {
		if err != nil {
			t.Fatalf("record %d: %v, want it published", i, err)
		}
	}
}

// A limit of the publisher's own client (kgo.ProducerBatchMaxBytes,
// kgo.MaxBufferedBytes) set below a record is the caller's configuration, not
// the record's fault: an outage (no strike, never dead), whose error names the
// setting to raise.
func TestClientLimitIsAnOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		setting string
		opt     kgo.Opt
	}{
		{"kgo.ProducerBatchMaxBytes", kgo.ProducerBatchMaxBytes(4000)},
		{"kgo.MaxBufferedBytes", kgo.MaxBufferedBytes(4000)},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, "orders")
			errs := publish(t, newPublisher(t, c, tc.opt), "orders", sized("a", 0, 6000))
			err := errs[0]
			switch {
			case err == nil:
				t.Fatal("published, want an outage")
			case errors.Is(err, relay.ErrRejected):
				t.Fatalf("%v: refused (a strike toward dead-lettering), want an outage", err)
			case !errors.Is(err, kerr.MessageTooLarge) || !errors.Is(err, kafka.ErrClientLimit):
				t.Fatalf("%v, want it to wrap kerr.MessageTooLarge and kafka.ErrClientLimit", err)
			case !strings.Contains(err.Error(), tc.setting):
				t.Fatalf("%v, want it to name %s", err, tc.setting)
			}
		})
	}
}

// DefaultRecordMaxBytes leaves room for the largest payload the write path
// can be set to accept, with the most metadata it accepts as headers.
func TestRecordLimitCoversTheWritePath(t *testing.T) {
	if need := outboxhook.MaxPayloadLimit + outboxhook.MaxMetadataBytes + 64<<10; kafka.DefaultRecordMaxBytes < need {
		t.Fatalf("DefaultRecordMaxBytes is %d, want at least %d", kafka.DefaultRecordMaxBytes, need)
	}
	if kafka.DefaultBatchMaxBytes < 1_048_588 {
		t.Fatalf("DefaultBatchMaxBytes is %d, below Kafka's default max.message.bytes", kafka.DefaultBatchMaxBytes)
	}
}
