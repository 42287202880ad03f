// Package drivertest is the driver-level suite: it calls each method of a
// store.Driver directly, against a real database, with no relay, inbox or
// write path above it (the conformance suite, internal/conformance, covers
// those). Its model is riverqueue/river's riverdrivertest.
//
// There is one file per interface of package store: outbox.go (store.Outbox),
// inbox.go (store.Inbox), relay.go (store.Relay: claims, marks, figures,
// cleanup), leases.go (store.Leases), admin.go (store.Admin) and
// waker.go (store.Waker). A test that needs something not every database
// offers skips by what the driver declares (its Caps, a nil Waker, no
// tokens from Insert), never by the database's name.
//
// Each driver's package runs it with a Harness, which says how to open a
// database of the test's own and gives the SQL the suite needs beyond the
// driver's methods (reading a row's raw columns, making a row due or dead):
// the database's testsql.SQL, test support outside the driver's package:
//
//	func TestDriver(t *testing.T) {
//		drivertest.Run(t, drivertest.Harness{Driver: sqlite.Driver{}, SQL: testsql.SQLite{}, Open: openTestDB})
//	}
//
// The package imports no package testing (a test's t is a tb.TB to it), as
// none of the test-support packages does.
package drivertest
