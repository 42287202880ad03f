// Package publishers holds Herald's broker publishers, one package each:
// Watermill message.Publishers that also report a result per message
// (relay.BatchPublisher), so the relay pipelines its publishes and retries
// exactly the refused messages. They live in a module of their own: the
// library's module keeps no broker client.
package publishers
