// Package sqlkit is the drivers' toolkit: what the database drivers
// (internal/store/postgres, mysql, sqlite) share to implement package store's
// interfaces over database/sql (and the migration engine, package migrate,
// its transactions). It is not the contract: nothing above the seam imports
// it (package store is what the write path, the relay, the inbox and the
// admin see).
//
// It holds the calls every driver makes alike: running a query and reading
// its rows (QueryRow, Collect, Column, Affected, Found, FoundIDs, FoundIn),
// a transaction and a savepoint (InTx, Savepoint); the arguments of the
// statements of MySQL and SQLite, with their ? placeholders (Placeholders,
// Anys, OrderedClaim); the marks of a claimed batch (Marks, which a driver's
// store.Batch embeds, over the driver's Marker) and the keys and fences they
// are written with (Key, ExecSeqs, CheckFence, FenceJSON,
// FenceParts); the admin's requeue of ids and topic figures (RequeueEach,
// ScanTopics); the heartbeats' calls over a database's statements
// (HeartbeatSQL); the aggregate locks' buckets (Buckets); and what a
// database without a capability returns (NoWaker, Unpositioned).
package sqlkit
