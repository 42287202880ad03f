// Package amqp is Herald's RabbitMQ publisher: a Watermill message.Publisher
// and a relay.BatchPublisher that publishes with publisher confirms,
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
// (basic.return, before its ack) and fails with ErrReturned; a nack fails
// with ErrNacked; a channel or connection closed before the confirm fails the
// unconfirmed messages with ErrChannelClosed; the end of the call's context
// fails those still unconfirmed. One message's failure does not fail the
// others: the relay marks the confirmed ones published and retries exactly
// the failed ones. The next call after a closed channel or connection opens
// or dials again.
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
