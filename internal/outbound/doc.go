// Package outbound is what both relays (package relay, the outbox table's,
// and package walrelay, the WAL's) do alike to publish an event: the message
// built from a stored row, the publish call (timeout, panic, one result per
// message, producer spans), the evidence that a later call succeeded, whose
// fault a failure is (publish.ErrRejected) and the error it records
// (LastError), and the wait between attempts (Sleep). Each exists once, here.
package outbound
