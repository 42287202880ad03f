// Package cqrs shows Herald with Watermill's CQRS component, both ways: events
// Herald relays handled by a cqrs.EventProcessor with the application's own
// event structs (inbox.CQRSMarshaler), and an application that published with
// a cqrs.EventBus moving to Herald while its consumers, written for
// cqrs.JSONMarshaler, stay as they are (outboxhook.Config.EventMetadata). See
// the Example functions; they run on an SQLite file, with no server.
package cqrs
