// Package amqp is Herald's RabbitMQ publisher: a Watermill message.Publisher
// and a publish.BatchPublisher that publishes with publisher confirms,
// pipelined, and reports a result per message.
//
// # How it publishes
//
// Each call takes a confirm-mode channel of its own from a pool (Channel.Confirm)
// and publishes its messages without waiting, up to Config.MaxInFlight
// unconfirmed over all calls; each publish is matched to its confirm by its
// delivery tag (PublishWithDeferredConfirm). A message is a success only when
// RabbitMQ confirmed it (basic.ack) and did not return it: every message is
// published mandatory, and one RabbitMQ cannot route to any queue comes back
// (basic.return, before its ack) and fails with ErrReturned (retried: see
// "Whose fault a failure is"); a nack fails
// with ErrNacked; a channel or connection closed before the confirm fails the
// unconfirmed messages with ErrChannelClosed; the end of the call's context
// fails those still unconfirmed. One message's failure does not fail the
// others: the relay marks the confirmed ones published and retries exactly
// the failed ones. The next call after a closed channel or connection opens
// or dials again.
//
// # Whose fault a failure is
//
// A failed message is either its own refusal, which no retry changes (its
// error wraps publish.ErrRejected: the relay counts a strike at once, and the
// event dies after MaxAttempts), or the broker's condition, which an
// operator or time fixes for every message alike (a plain error: retried,
// it kills nothing). One function, classify, decides it for every message,
// by this table (TestContract runs each row against RabbitMQ):
//
//	Condition                       Broker's answer                                  Herald
//	too large alone (headers)       none: headers over the connection's frame_max    refused before it is sent
//	                                (a content header is one frame)                  (ErrUnframable)
//	too large alone (body)          none when known (Config.MaxMessageSize, or       refused before it is sent
//	                                learned); else the channel closed, 406           (ErrTooLarge); the first time,
//	                                PRECONDITION_FAILED "message size N is larger    the call's later messages fail
//	                                than configured max size M"                      with the channel: outage
//	too large as a batch            none: each message is published alone           -
//	bad header                      none: a header name over 255 bytes, a value      refused before it is sent
//	                                of no AMQP field type                            (ErrUnframable)
//	bad routing key / exchange      none: over 255 bytes (a short string)            refused before it is sent
//	                                                                                 (ErrUnframable)
//	full queue                      basic.nack (x-overflow reject-publish)           outage (ErrNacked)
//	unroutable                      basic.return 312 NO_ROUTE (no queue bound)       outage (ErrReturned)
//	exchange missing                the channel closed, 404 NOT_FOUND (NoDeclare)    outage (ErrChannelClosed)
//	permission denied               the channel closed, 403 ACCESS_REFUSED           outage (ErrChannelClosed)
//	timeout                         none within the call's context                   outage (the context's error)
//	connection lost                 the connection closed, or no dial                outage (ErrChannelClosed, dial error)
//	anything else                   any other error                                  outage
//
// A message AMQP cannot frame is refused before anything of it is written:
// a connection's frames are one stream, and amqp091 fails a frame in the
// middle of writing it, which closes the connection under every message of
// every call on it, the ones sent before it included, at every retry. A
// full queue nacks every message, no queue bound returns every message, a
// missing exchange or a permission closes the channel for every message:
// the topology's condition, which an operator's fix (a consumer catching up,
// a queue bound, a permission granted) publishes all at once.
//
// # Order
//
// Within a call, messages are published in the order given, on one channel;
// RabbitMQ keeps a channel's order into each queue. The relay's ordered mode
// gives a call at most one event per aggregate and publishes an aggregate's
// next event only after a copy of this one is confirmed (stored), so when a
// message in the middle of a window is refused, returned or times out, no
// later event of its aggregate goes out before it is stored: the first copies
// in a queue are in commit order. A copy from a timed-out call that lands
// after its retry is a duplicate, for the consumer's inbox; to keep those
// few, a call whose context ended closes its channel before it returns
// (RabbitMQ handles a channel's frames in order: once the close is
// acknowledged, nothing of that call is still on its way).
//
// # Compatible with watermill-amqp
//
// The defaults are the topology of watermill-amqp v3's
// amqp.NewDurablePubSubConfig: a durable fanout exchange named after the
// topic (declared on first use), an empty routing key, persistent delivery
// mode. Messages are encoded as its DefaultMarshaler does: the payload as the
// body, each metadata key as a string header, the UUID in the
// "_watermill_message_uuid" header. A watermill-amqp subscriber with that
// config (its queue bound to the topic's exchange) reads the same UUID,
// metadata and payload. Config.Exchange, ExchangeType and RoutingKey map
// other topologies (a direct or topic exchange, a routing key per message).
//
// # Safe for an outbox, and what is not
//
// A relay marks an event published when Publish returns nil: that must mean
// the broker holds it. watermill-amqp's publisher without
// Config.Publish.ConfirmDelivery (off in every preset, the durable ones too)
// returns as soon as the frames are written to the socket: RabbitMQ may not
// have received the message, may drop it (a connection lost, a broker
// crash before it is stored), and the relay has marked the row all the same:
// the event is lost behind the outbox. With ConfirmDelivery on, it waits for
// each message's confirm in turn, one round trip (and for a persistent
// message, a disk sync) per message, and still counts as published a message
// no queue is bound for: RabbitMQ acks a message it routed nowhere, and
// watermill-amqp reads no returns (without Publish.Mandatory there are none).
// An exchange whose queue is not declared yet (a subscriber that never ran)
// swallows every event. This publisher waits for the
// confirms of a whole window at once, counts returns as failures, and
// publishes persistent messages: an event is marked only once RabbitMQ has
// stored it in a queue (on a durable queue, on disk).
package amqp
