// Package publishers holds Herald's broker publishers, one package each:
// Watermill message.Publishers that also report a result per message
// (publish.BatchPublisher), so the relay pipelines its publishes and retries
// exactly the refused messages. Each decides, in one function (classify),
// whether a failure is the message's own refusal (its error wraps
// publish.ErrRejected: a strike at once) or the broker's condition (a plain
// error: an outage, which kills nothing), by the table in its package
// documentation ("Whose fault a failure is"), each row tested against the
// broker. They live in a module of their own: the library's module keeps no
// broker client.
package publishers
