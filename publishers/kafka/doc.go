// Package kafka is Herald's Kafka publisher: a Watermill message.Publisher
// and a relay.BatchPublisher on franz-go (github.com/twmb/franz-go), safe for
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
// # Tests and figures
//
// There is no Kafka broker (no JVM) on the machine this package is developed
// on: its tests, example and benchmarks run against franz-go's in-process
// fake cluster, kfake (github.com/twmb/franz-go/pkg/kfake), faults injected
// with its control hooks. Figures measured on kfake are not those of a real
// Kafka cluster.
package kafka
