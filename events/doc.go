// Package events is Herald's event contract, free of infrastructure: a package
// of domain models that records events imports neither Watermill nor GORM
// through it.
//
// A domain event is any Go value that implements [Event]: it names its type
// ("order.paid") and, optionally through [Versioned], the schema version of its
// payload. When an aggregate records an event it becomes a [Record]: the event plus
// a UUIDv7 id taken at that moment, the time it occurred and its [Metadata]. The
// outbox hook stores a record as an [Envelope] (type, version, aggregate, topic,
// encoded payload, metadata); the relay turns envelopes into Watermill messages
// (relay.NewMessage: the message UUID is the event id, and the metadata
// [Envelope.MessageMetadata]), and consumers read them back (inbox.FromMessage,
// or [ParseEnvelope] on a message's parts) and decode the payload into its Go
// type through a [Registry] (inbox.Decode).
//
// The event id is the message id end to end: the message UUID, repeated in the
// metadata key [MetaID], so that it survives brokers that replace the message
// UUID.
package events
