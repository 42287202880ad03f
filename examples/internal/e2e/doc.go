// Package e2e holds the tests that need real brokers or real processes: the
// relay on NATS JetStream and RabbitMQ, three ordered relay processes with one
// SIGKILLed, a broker outage, and outbox -> relay -> broker -> inbox with
// duplicates and failures, on each database Herald supports. They live in the
// examples module so that the library's module needs no broker adapter.
package e2e
