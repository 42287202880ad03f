package main

import (
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// verifyDrained is the check every burn-down scenario passes before its
// figure is printed (relay: the SQL references, Herald's relay in each mode,
// the forwarder, the broker reference; relay -scheduled; wal): it drained
// exactly n events (published, or deleted by a reference that publishes
// nothing), and its outbox (db's outbox_messages; nil: a scenario without
// one) holds exactly keep rows at the end, all of them pending (the events
// scheduled ahead that were not due; 0 elsewhere). Anything else is an error
// giving the counts (the caller names the scenario): a figure of n events
// over the time of fewer is no figure.
func verifyDrained(n int, drained int64, db *gorm.DB, keep int) error {
	rows, pending := int64(keep), int64(keep)
	if db != nil {
		err := db.Raw(`SELECT count(*), count(CASE WHEN processed_at IS NULL AND dead_at IS NULL THEN 1 END) FROM outbox_messages`).
			Row().Scan(&rows, &pending)
		if err != nil {
			return fmt.Errorf("counting the outbox at the end: %w", err)
		}
	}
	if drained == int64(n) && rows == int64(keep) && pending == int64(keep) {
		return nil
	}
	return fmt.Errorf("drained %d of %d events (published or deleted); at the end the outbox holds %d rows (%d pending), want %d: no figure",
		drained, n, rows, pending, keep)
}

// claimAll runs an SQL reference's claim (claim up to 1000 due events, read
// them, delete them) until n events are deleted or a claim finds nothing,
// and returns how many it deleted and the time that took; whether that is n
// is verifyDrained's to say.
func claimAll(claim func(*sql.DB) (int, error), db *sql.DB, n int) (int64, time.Duration, error) {
	start := time.Now()
	var deleted int64
	for deleted < int64(n) {
		k, err := claim(db)
		if err != nil {
			return deleted, 0, err
		}
		if k == 0 {
			break
		}
		deleted += int64(k)
	}
	return deleted, time.Since(start), nil
}
