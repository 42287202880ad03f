// Package kafka is Herald's Kafka publisher: a Watermill message.Publisher
// and a publish.BatchPublisher on franz-go (github.com/twmb/franz-go), safe for
// an outbox.
//
// # What it sends
//
// Each message is one record: its value the payload; its key the aggregate
// id (metadata events.MetaAggregateID), so that with a key-hashing
// partitioner (franz-go's default) all events of one aggregate go to one
// partition, where Kafka keeps them in order; an event of no aggregate is
// keyed by its event id. Its headers are the message UUID
// ("_watermill_message_uuid", UUIDHeaderKey) and one header per metadata key,
// as watermill-kafka's DefaultMarshaler writes them, so consumers keep using
// watermill-kafka's subscriber (or read the headers with any client).
//
// # Why it is safe for an outbox
//
// The relay marks an event published when Publish (or PublishBatch) says the
// broker has it. watermill-kafka's publisher uses Sarama with its defaults:
// acks=1 (WaitForLocal) and no idempotent producer. With acks=1 the partition
// leader acknowledges a record before any follower has it; if that leader
// fails then, a follower without the record becomes leader and the record is
// gone, while the outbox row is already marked: an acknowledged event lost.
// Without idempotence, a retried produce can also write a record twice or
// (with more than one request in flight) reorder an aggregate's events.
//
// This publisher uses franz-go's idempotent producer with acks=all
// (kgo.RequiredAcks(kgo.AllISRAcks())): a record is acknowledged once every
// in-sync replica has it (set min.insync.replicas=2 on a topic of replication
// factor 3 for that to mean two copies), and franz-go's retries are
// deduplicated and kept in order by the broker through the producer's
// sequence numbers. New refuses options that turn either off
// (ErrUnsafeOption). If you keep watermill-kafka's publisher instead, set
// Producer.RequiredAcks = sarama.WaitForAll, Producer.Idempotent = true and
// Net.MaxOpenRequests = 1 in its Sarama config.
//
// # Pipelining
//
// PublishBatch hands every record of a call to franz-go at once (Produce,
// with a promise per record), franz-go batches them per partition and keeps
// several requests in flight, and the call returns one result per record:
// the relay marks the acknowledged ones and retries exactly the failed ones.
// Records to one partition are ordered; with the idempotent producer, when a
// batch fails, the records after it in that partition may fail too: each
// failed record gets its own error. In ordered mode the relay sends at most
// one event per aggregate per call and the next only after the previous was
// acknowledged, so a later event of an aggregate never lands before an
// earlier one's first copy.
//
// # Whose fault a failure is
//
// A failed record is either its own refusal, which no retry changes (its
// error wraps publish.ErrRejected: the relay counts a strike at once, and the
// event dies after MaxAttempts), or the brokers' condition, which an
// operator or time fixes for every record alike (a plain error: retried,
// it kills nothing). One function, classify, decides it for every record,
// by this table (TestContract runs each row against kfake):
//
//	Condition                      Brokers' answer                                   Herald
//	too large alone                MESSAGE_TOO_LARGE to a batch of that record       refused (ErrRejected)
//	                               alone (over the topic's max.message.bytes)
//	over a limit of the client     (never sent) franz-go's MESSAGE_TOO_LARGE for a   outage (ErrClientLimit, naming
//	                               record alone over kgo.ProducerBatchMaxBytes,      the setting)
//	                               kgo.MaxBufferedBytes, kgo.BrokerMaxWriteBytes
//	                               set in Config.Options
//	too large as a batch           MESSAGE_TOO_LARGE or RECORD_LIST_TOO_LARGE to     each record produced again in a
//	                               a batch of several records                        batch of its own, in the same
//	                                                                                 call; its result is that answer
//	invalid (as a batch / alone)   INVALID_RECORD, CORRUPT_MESSAGE,                  as too large: a batch's is no
//	                               INVALID_TIMESTAMP, POLICY_VIOLATION               record's own; alone, refused
//	bad header                     (never sent) metadata sets UUIDHeaderKey          refused (ErrReservedMetadata)
//	invalid topic name             INVALID_TOPIC_EXCEPTION                           refused
//	full                           KAFKA_STORAGE_ERROR (a disk), retried by          outage (plain error)
//	                               franz-go until the call's context ends
//	topic missing (unroutable)     UNKNOWN_TOPIC_OR_PARTITION after                  outage
//	                               kgo.UnknownTopicRetries
//	permission denied              TOPIC_AUTHORIZATION_FAILED                        outage
//	timeout                        REQUEST_TIMED_OUT, the call's context ended       outage
//	connection lost                franz-go's dial or read error, the context ended  outage
//	anything else                  any other error                                   outage
//
// The client's limits are the caller's configuration: a record over one is
// refused before it reaches a broker, for every record of its size alike,
// and raising the setting publishes them all, so it is an outage (logged at
// warning level with the setting to raise), never the record's strike. By
// default they leave every event the write path accepts to the brokers: the
// client packs records in batches up to DefaultBatchMaxBytes (Kafka's
// default max.message.bytes), and a record larger than that is produced
// alone, up to DefaultRecordMaxBytes (the write path's largest payload
// setting with its metadata). Whether it is too large is then the topic's
// max.message.bytes to say: over it, the brokers refuse it, and that is the
// record's own. Kafka's default (1,048,588 bytes) takes a payload at the
// write path's default limit (outboxhook.DefaultMaxPayloadBytes, 956 KiB)
// with the most metadata it accepts; a write path set to accept more needs
// the topic's max.message.bytes raised as much.
//
// A topic missing, or not writable by this client, refuses every record
// alike, and an operator's fix publishes them all: killing its events would
// make a configuration mistake lose them. Kafka answers a refusal per
// partition's record batch, never naming the record: franz-go packs many
// records in one, so a batch too large for the topic, or with one invalid
// record, would otherwise kill records the broker takes alone. The records
// produced again alone go through a second franz-go client (the same
// options; made on first use), at most one record per partition on its way
// at a time.
//
// # Tests and figures
//
// There is no Kafka broker (no JVM) on the machine this package is developed
// on: its tests, example and benchmarks run against franz-go's in-process
// fake cluster, kfake (github.com/twmb/franz-go/pkg/kfake), faults injected
// with its control hooks. Figures measured on kfake are not those of a real
// Kafka cluster.
package kafka
