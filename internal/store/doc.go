// Package store is Herald's storage seam: every statement the write path, the
// relay and the inbox send to a database goes through the interfaces here, and
// each database has one implementation holding all of its SQL (packages
// postgres, sqlite and mysql below this one). This package is the contract
// alone: the interfaces, the types they take and return, the errors, the
// capabilities and the default names. What the drivers share to implement it
// (running a query, the marks of a batch, the heartbeat statements' calls) is
// package sqlkit, their toolkit; the migration engine (reading the migration
// files, applying them, Herald's own creation and check of its tables) is
// package migrate, which the drivers, package migrations and the herald
// command use. The implementation is picked from
// the *gorm.DB's dialector (package drivers). The driver-level suite
// (package drivertest) calls each driver's methods directly, and the
// conformance suite (internal/conformance, above every package it tests)
// runs the same behaviour through the public API against each database.
//
// The operations are named after what they do for the outbox, not after SQL:
// insert events, settle earlier writes, lock aggregates, claim, mark, lease,
// clean up, notify. Each takes the Execer to run on (a pool, a transaction, a
// connection), so the caller decides the transaction; a claim is the
// exception: Relay.Claim takes the pool and returns a Batch that owns the
// transaction of its marks, since how a batch holds its rows (row locks kept
// in a transaction, a lease, nothing in ordered mode) is the database's
// choice, and so is what the driver keeps from it (PostgreSQL's claim
// position).
//
// A method that would take five arguments or more, or a bool, takes a params
// struct instead, named after it as River's riverdriver names them
// (ClaimParams for Relay.Claim, AcquireParams; OutboxInsertParams and
// RelayCreateParams where the method's name alone is not unique): a call then says what each value is.
//
// What a database cannot do is declared once, in Driver.Caps (a set of
// Capability values), and an operation it cannot do returns ErrNotSupported.
// The outbox kept in the log (Messages) is one capability with operations of
// its own: what the WAL relay, the admin page and the herald command ask of
// the log (its slots, its stream, the decoding of its messages) is
// Driver.WAL (wal.go), nil for a database without it.
//
// # The drivers' files
//
// Every driver keeps one concern in one file of the same name (as
// watermill-sql names concern_dialect.go), so that the same job is found in
// the same place on each database:
//
//   - driver.go: the Driver, its Caps, quoting, the database's errors;
//   - schema.go: the migrations, ObjectExists, what Create and Check make;
//   - outbox.go, inbox.go: Outbox (the write path), Inbox;
//   - relay.go: the Relay, its statements assembled from the files of their
//     concern, and the pieces of SQL those files share;
//   - claim.go, batch.go, mark.go: Relay.Claim, the Batch it returns, the
//     marks;
//   - recovery.go, stats.go, cleanup.go: Relay.RecoverOutage, Stats,
//     Cleanup;
//   - leases.go, heartbeat.go: the partition leases, the relays' heartbeats;
//   - admin.go: Admin;
//   - waker.go, wal.go: Waker, WALOutbox and WAL (on MySQL and SQLite, what
//     says they have none).
//
// A database's own files come beside them: PostgreSQL's position.go and
// frontier.go (where claims start), partitions.go (Partitions) and
// wal_*.go (the WAL relay's side of Messages); SQLite's dsn.go.
//
// # Adding a database
//
// A fourth database is one new folder here and a line in package drivers:
//
//   - internal/store/<db>/: a Driver (Outbox, Inbox, Relay with its Claim and
//     Batch, Admin, Leases, Heartbeats, Waker or sqlkit.NoWaker, WALOutbox or
//     ErrNotSupported), in the files named above, its numbered migrations
//     (migrations/NNNN_name.up.sql and .down.sql, append-only, with the
//     "-- herald:" comments package migrate reads), and a
//     driver_test.go that runs drivertest.Run with a harness opening an
//     isolated database;
//   - internal/drivers: the driver in the list of supported databases (and,
//     where the database needs a connection setting, a check in Check);
//   - internal/testkit/testsql: the SQL the tests need of the database beyond
//     Herald's own (a file of its own, given to drivertest by the harness and
//     to the other tests by the Dialect);
//   - internal/testkit: its Dialect, the entry of the test matrix (how a test
//     gets a database of its own), which runs the conformance suite on it.
//
// The packages above (outboxhook, relay, inbox, admin, walrelay) name no
// database, nor does the herald command beyond the URLs it reads;
// migrations finds the new database's files by name (ForDatabase), and may
// give them an accessor of their own beside Postgres, SQLite and MySQL.
package store
