// Package natsjs is Herald's NATS JetStream publisher: a Watermill
// message.Publisher that is also a relay.BatchPublisher, so the relay
// pipelines its publishes and retries exactly the messages JetStream refused.
//
// Messages are published asynchronously, up to Config.MaxInFlight at once
// over every call, and each counts as published only when JetStream
// acknowledged it: stored in a stream. A message that fails (too large for
// the server, refused by its stream, not acknowledged within
// Config.AckTimeout) fails alone; the others of the call still succeed. The
// event id (the message UUID) travels as Nats-Msg-Id: a copy published again
// within the stream's duplicate window (two minutes by default) is dropped
// by JetStream, so a retry after a lost ack stores nothing twice.
//
// The UUID and the metadata travel in headers exactly as watermill-nats'
// NATSMarshaler writes them: consumers keep using watermill-nats'
// JetStream subscriber, with NATSMarshaler as its Unmarshaler, and get the
// same UUID and metadata. With Config.AutoProvision, a topic's stream is
// created as watermill-nats creates it (named after the topic, the topic as
// its subject).
//
// # Safe and unsafe Watermill settings for an outbox
//
// A relay marks an event published when Publish returns nil, so Publish
// must return only once the broker has stored the message. watermill-nats
// with JetStream (its default, JetStreamConfig.Disabled false) waits for
// JetStream's ack of each message: safe, but one message at a time. With
// JetStreamConfig.Disabled set it publishes on core NATS, which stores
// nothing and acknowledges nothing: Publish returns once the message is in
// the client's buffer, a message no subscriber is connected for is dropped,
// and a connection lost before the buffer was flushed loses the message,
// while the relay has marked its event published. Likewise
// JetStreamConfig.AckAsync concerns the subscriber's acks, not the
// publisher's: the publisher must wait for the store's ack. Without
// TrackMsgId, watermill-nats sends no Nats-Msg-Id and every retry after a
// lost ack is stored again (TrackMsgId defaults to false).
//
// This package is safe: it never reports a message published before its
// JetStream ack, it always sends Nats-Msg-Id, and it keeps many messages in
// flight, so it publishes at the broker's speed rather than at one round
// trip per message. In ordered mode the relay sends at most one event per
// aggregate in a call, and the next event of an aggregate only after the
// previous one was acknowledged, so pipelining keeps each aggregate's first
// copies in commit order, also when a message in the middle of a window
// fails.
package natsjs
