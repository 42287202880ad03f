package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldgo/herald/publish"
)

// classify decides what a record's failed produce to topic is, by the one
// rule of the package documentation ("Whose fault a failure is"): the
// record's own refusal (the error returned wraps publish.ErrRejected: a strike
// at once), or the brokers' condition (a plain error: retried, it kills
// nothing). alone says whether the record went in a batch of its own. A
// refusal of a batch of several records says nothing of each: again is true,
// and the record must be produced again alone (see Publisher.alone) and its
// verdict taken from that answer. Every publish path calls it.
func classify(topic string, err error, alone bool) (out error, again bool) {
	switch {
	case err == nil:
		return nil, false
	case errors.Is(err, ErrClientLimit):
		// Refused by the publisher's own client, before sending: the
		// caller's setting, which an operator raises (see Publisher.alone).
		return fmt.Errorf("kafka: produce to %s: %w", topic, err), false
	case errors.Is(err, ErrReservedMetadata):
		// Never sent: no retry changes the message.
		return fmt.Errorf("%w: %w", publish.ErrRejected, err), false
	case refusesContent(err) && !alone:
		return err, true
	case refusesContent(err), errors.Is(err, kerr.InvalidTopicException):
		// Refused alone, for what the record is; or its topic's name is one
		// Kafka's rules never accept.
		return fmt.Errorf("%w: kafka: produce to %s: %w", publish.ErrRejected, topic, err), false
	default:
		// The brokers' condition, refusing every record alike: a timeout, a
		// connection lost, a topic missing or not writable by this client
		// (an operator's fix publishes them all), a leader moving.
		return fmt.Errorf("kafka: produce to %s: %w", topic, err), false
	}
}

// refusesContent reports whether err is a broker's refusal of a partition's
// record batch for its content: too large (MESSAGE_TOO_LARGE, also franz-go's
// own for a record larger than the client's limits, which then is produced
// again alone, where Publisher.alone tells a limit of the client from the
// brokers' answer; RECORD_LIST_TOO_LARGE), invalid, corrupt, a timestamp out
// of range, a policy. Kafka answers it per batch, never naming the record.
func refusesContent(err error) bool {
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage,
		kerr.InvalidTimestamp, kerr.PolicyViolation} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// soloClient produces records one per batch: its own franz-go client (the
// publisher's options, records placed by hand in the partition the
// publisher's client chose) through which at most one record per partition
// is on its way at a time, so each record batch it sends holds one record.
type soloClient struct {
	mu     sync.Mutex
	client *kgo.Client // made on first use
	err    error       // why it could not be made
	closed bool
	lanes  map[string]chan struct{} // topic/partition: a token while a record is on its way
}

// alone produces rec again in a record batch of its own, to the partition it
// was produced to, and returns the brokers' answer: a refusal now is the
// record's own. It returns when the record has its answer or ctx is done.
func (p *Publisher) alone(ctx context.Context, rec *kgo.Record) error {
	cl, lane, err := p.solo.lane(p.opts, rec.Topic, rec.Partition)
	if err != nil {
		return err
	}
	select {
	case lane <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	again := &kgo.Record{Topic: rec.Topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
	done := make(chan error, 1)
	cl.Produce(ctx, again, func(_ *kgo.Record, err error) {
		<-lane // the lane is free only once the record has its answer
		done <- err
	})
	select {
	case err := <-done:
		if errors.Is(err, kerr.MessageTooLarge) {
			if over := overClientLimit(cl, again); over != "" {
				err = fmt.Errorf("%w: %s: raise it in Config.Options (the topic's max.message.bytes then decides): %w", ErrClientLimit, over, err)
				p.log.Warn("kafka: a record is larger than a limit of the publisher's client: retried as an outage until the setting is raised",
					"topic", rec.Topic, "limit", over, "err", err)
			}
		}
		return err
	case <-ctx.Done():
		return ctx.Err() // a record on its way keeps its lane until answered
	}
}

// soloSlack bounds what a record batch of one record takes beyond its key,
// value and header bytes, whatever the produce request's version: the batch
// header (61 bytes), the record's length, attributes, deltas and lengths
// (varints), and the request's overhead around one partition.
const soloSlack = 512

// overClientLimit says which limit of cl, the solo client, may have refused
// rec (alone in its batch) with MESSAGE_TOO_LARGE before sending it: the
// setting and its value, or "" when rec fits every one of them with room to
// spare, so that the answer was the brokers'. A record within soloSlack
// bytes of a limit counts as over it: an outage, never a wrong strike.
func overClientLimit(cl *kgo.Client, rec *kgo.Record) string {
	size := int64(len(rec.Key) + len(rec.Value)) // as franz-go counts it
	for _, h := range rec.Headers {
		size += int64(len(h.Key) + len(h.Value))
	}
	if limit, _ := cl.OptValue(kgo.MaxBufferedBytes).(int64); limit > 0 && size > limit {
		return fmt.Sprintf("record of %d bytes (key, value, headers) over kgo.MaxBufferedBytes (%d)", size, limit)
	}
	wire := size + 10*int64(len(rec.Headers)) + soloSlack + int64(len(rec.Topic)) // each header's two lengths: varints
	if fn, _ := cl.OptValue(kgo.ProducerBatchMaxBytesFn).(func(string) int32); fn != nil {
		if limit := int64(fn(rec.Topic)); wire > limit {
			return fmt.Sprintf("record of %d bytes (key, value, headers) over kgo.ProducerBatchMaxBytes (%d)", size, limit)
		}
	}
	if limit, _ := cl.OptValue(kgo.BrokerMaxWriteBytes).(int32); limit > 0 && wire > int64(limit) {
		return fmt.Sprintf("record of %d bytes (key, value, headers) over kgo.BrokerMaxWriteBytes (%d)", size, limit)
	}
	return ""
}

// lane returns the solo client, made with opts on first use, and the lane of
// topic's partition.
func (s *soloClient) lane(opts []kgo.Opt, topic string, partition int32) (*kgo.Client, chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, ErrClosed
	}
	if s.client == nil && s.err == nil {
		o := append(append([]kgo.Opt{}, opts...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		s.client, s.err = kgo.NewClient(o...)
		if s.err != nil {
			s.err = fmt.Errorf("kafka: new client for records alone: %w", s.err)
		}
	}
	if s.err != nil {
		return nil, nil, s.err
	}
	key := topic + "/" + strconv.Itoa(int(partition))
	if s.lanes == nil {
		s.lanes = map[string]chan struct{}{}
	}
	l, ok := s.lanes[key]
	if !ok {
		l = make(chan struct{}, 1)
		s.lanes[key] = l
	}
	return s.client, l, nil
}

func (s *soloClient) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.client != nil {
		s.client.Close()
	}
}
