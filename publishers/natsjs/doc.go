// Package natsjs is Herald's NATS JetStream publisher: a Watermill
// message.Publisher that is also a publish.BatchPublisher, so the relay
// pipelines its publishes and retries exactly the messages JetStream refused.
//
// Messages are published asynchronously, up to Config.MaxInFlight at once
// over every call, and each counts as published only when JetStream
// acknowledged it: stored in a stream. A message that fails (too large for
// the server, refused by its stream, not acknowledged within
// Config.AckTimeout) fails alone; the others of the call still succeed.
// Whether the failure is the message's own is decided by the table below. The
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
// # Consuming
//
// NewSubscriber returns a consumer's subscriber for what Publisher
// publishes, given the consumer's name: watermill-nats' JetStream
// subscriber with the settings an outbox's consumer needs
// (SubscriberConfig.Watermill lists them and why), on a durable consumer it
// creates itself, so that the consumer's position and its unacknowledged
// messages outlive every subscriber. A message is acked only once its
// handler acked it; one whose subscriber closed or whose process stopped
// first is delivered again after SubscriberConfig.AckWait:
//
//	sub, err := natsjs.NewSubscriber(natsjs.SubscriberConfig{URL: url, Consumer: "shipping", AutoProvision: true})
//	...
//	router.AddConsumerHandler("ship-order", "order_paid", sub, handler) // behind the inbox
//
// # Whose fault a failure is
//
// A failed message is either its own refusal, which no retry changes (its
// error wraps publish.ErrRejected: the relay counts a strike at once, and the
// event dies after MaxAttempts), or the server's condition, which an
// operator or time fixes for every message alike (a plain error: retried,
// it kills nothing). One function, classify, decides it for every message,
// by this table (TestContract runs each row against the NATS server):
//
//	Condition                       Server's answer                                  Herald
//	too large alone                 nats.ErrMaxPayload (over the server's            refused (ErrRejected)
//	                                max_payload); API error 10054 (over the
//	                                stream's max_msg_size)
//	too large as a batch            none: each message is published alone            -
//	bad header                      (never sent) ErrBadHeader                        refused
//	expectation not met             API error 10060, 10070, 10071 (a                 refused
//	                                Nats-Expected-* header in the metadata)
//	invalid subject                 (never sent, no stream made) nats.ErrBadSubject: refused
//	                                a topic empty, with whitespace or a control
//	                                character, an empty token or a wildcard
//	full stream                     API error 10077 (503: maximum messages, bytes    outage (plain error)
//	                                or messages per subject exceeded, DiscardNew)
//	stream missing (unroutable)     jetstream.ErrNoStreamResponse (no stream         outage; re-provisioned on the next
//	                                captures the subject)                            call with AutoProvision
//	permission denied               no ack (the server drops the publish and        outage
//	                                tells the connection's error handler)
//	timeout                         jetstream.ErrAsyncPublishTimeout, the call's     outage
//	                                context ended
//	connection lost                 no ack, the context ended, a closed connection   outage
//	anything else                   any other error, any other API error code        outage
//
// The server's max_payload bounds a message's payload and headers together,
// and is 1 MiB by default: the write path's default payload limit
// (outboxhook.DefaultMaxPayloadBytes, 956 KiB) leaves HeaderAllowance for
// the headers. A server with a smaller max_payload, or a write path set to
// accept more, can have a payload the save accepted refused at every
// publish: set outboxhook.Config.MaxPayloadBytes to Publisher.MaxPayloadBytes
// (max_payload less HeaderAllowance) or less, or raise the server's
// max_payload, so that the save refuses what the server would.
//
// With AutoProvision, a topic that a stream of another name already captures
// (its subjects overlap: API error 10065) is published to that stream.
//
// A full stream (DiscardNew and a limit, its consumers behind) refuses every
// message until they catch up: an outage, as a broker down is, which kills
// nothing. A stream missing or a subject this user may not publish to
// refuses every message alike, and an operator's fix publishes them all. An
// API error code the table does not name is an outage: taken for a refusal,
// an outage would kill events; a refusal taken for an outage is retried,
// and shows as failing.
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
