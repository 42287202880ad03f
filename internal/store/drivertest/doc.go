// Package drivertest is the driver-level suite: it calls each method of a
// store.Driver directly, against a real database, with no relay, inbox or
// write path above it (the conformance suite, internal/conformance, covers
// those). Its model is riverqueue/river's riverdrivertest.
//
// There is one file per interface of package store: outbox.go (store.Outbox),
// inbox.go (store.Inbox), relay.go (store.Relay: claims, marks, figures,
// requeues, cleanup), leases.go (store.Leases), admin.go (store.Admin) and
// waker.go (store.Waker). A test that needs something not every database
// offers skips by what the driver declares (its Caps, a nil Waker, no
// tokens from Insert), never by the database's name.
//
// Each driver's package runs it with a Harness, which says how to open a
// database of the test's own; the SQL the suite needs beyond the driver's
// methods (reading a row's raw columns, making a row due or dead) is the
// driver's own too, its store.TestSQL:
//
//	func TestDriver(t *testing.T) {
//		drivertest.Run(t, drivertest.Harness{Driver: sqlite.Driver{}, Open: openTestDB})
//	}
package drivertest
