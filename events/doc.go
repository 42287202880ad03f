// Package events is Herald's event contract.
//
// A domain event is any Go value that implements [Event]: it names its type
// ("order.paid") and, optionally through [Versioned], the schema version of its
// payload. When an aggregate records an event it becomes a [Record]: the event plus
// a UUIDv7 id taken at that moment, the time it occurred and its [Metadata]. The
// outbox hook stores a record as an [Envelope] (type, version, aggregate, topic,
// encoded payload, metadata); the relay turns envelopes into Watermill messages
// with [NewMessage], and consumers read them back with [FromMessage] and decode
// the payload into its Go type through a [Registry].
//
// The event id is the message id end to end: [NewMessage] sets msg.UUID to it and
// repeats it in the metadata key [MetaID], so that it survives brokers that replace
// the message UUID.
package events
