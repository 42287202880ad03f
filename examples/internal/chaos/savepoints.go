package main

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// -savepoints: some of the writers' transactions set a savepoint with raw SQL
// (tx.Exec), save the account, and roll back to it, in the spellings each
// database accepts (white space, case, comments, optional keywords, quoted
// names); half the writers run them through a PrepareStmt session (GORM then
// runs tx.Exec as a prepared statement, past the connection a plugin wraps).
// outboxhook must follow them: an event whose outbox row a ROLLBACK TO undid
// stays pending on its account, written by its next save.

// spShape is what one transaction does with its savepoint.
type spShape int

const (
	spNoSavepoint spShape = iota
	// spResave: SAVEPOINT, save, ROLLBACK TO, save again: committed.
	spResave
	// spCarry: SAVEPOINT, save, ROLLBACK TO, commit: nothing of the account
	// committed; its events stay pending on it (carried) until its next
	// save, in a later transaction.
	spCarry
	// spKept: SAVEPOINT, save, RELEASE (or nothing): committed.
	spKept
	// spAfter: save, SAVEPOINT, ROLLBACK TO: the rollback undoes nothing of
	// the save: committed.
	spAfter
)

// spStats counts the writers' savepoint transactions by shape, committed.
type spStats struct {
	shapes    [5]atomic.Int64
	prepared  atomic.Int64 // of them, through a PrepareStmt session
	carriedIn atomic.Int64 // events a later transaction committed after a ROLLBACK TO undid them
	flushed   atomic.Int64 // accounts saved after the writers stopped, to write what they carried
}

// savepointSpellings are a database's spellings of SAVEPOINT sp, ROLLBACK TO
// sp and RELEASE sp: each accepted by that database, some the hook's
// recogniser reads exactly, others (a name in another case on MySQL and
// SQLite) that put the transaction in doubt.
type savepointSpellings struct{ set, rollback, release []string }

func spellings(kind string) savepointSpellings {
	s := savepointSpellings{
		set: []string{"SAVEPOINT sp", "savepoint sp", "  \n\tSAVEPOINT sp", "/* chaos */ SAVEPOINT sp", "-- chaos\nSavePoint sp"},
		rollback: []string{"ROLLBACK TO sp", "  rollback to savepoint sp", "/* chaos: undo */ ROLLBACK TO SAVEPOINT sp",
			"-- chaos\nROLLBACK TO sp", "\n\tRollBack To SavePoint sp ", "ROLLBACK TO SP"},
		release: []string{"RELEASE SAVEPOINT sp", "release sp", "  /* chaos */ RELEASE sp"},
	}
	switch kind {
	case postgresDB:
		s.rollback = append(s.rollback, "ROLLBACK WORK TO SAVEPOINT sp", "ROLLBACK TRANSACTION TO sp", `ROLLBACK TO "sp"`)
	case sqliteDB:
		s.rollback = append(s.rollback, "ROLLBACK TRANSACTION TO SAVEPOINT sp", `ROLLBACK TO "sp"`)
	case mysqlDB:
		s.rollback = append(s.rollback, "ROLLBACK WORK TO SAVEPOINT sp", "ROLLBACK TO `sp`")
		// RELEASE SAVEPOINT, the keyword required: "RELEASE sp" is a syntax
		// error, which failed the transaction before the hook saw anything.
		s.release = []string{"RELEASE SAVEPOINT sp", "release savepoint sp", "  /* chaos */ RELEASE SAVEPOINT `sp`"}
	}
	return s
}

func pick(ss []string) string { return ss[rand.IntN(len(ss))] }

// savepointTx is the body of a writer's transaction of shape shape on
// account a.
func savepointTx(tx *gorm.DB, a *Account, shape spShape, sp savepointSpellings) error {
	exec := func(q string) error { return tx.Exec(q).Error }
	save := func() error { return tx.Save(a).Error }
	steps := map[spShape][]func() error{
		spNoSavepoint: {save},
		spResave:      {func() error { return exec(pick(sp.set)) }, save, func() error { return exec(pick(sp.rollback)) }, save},
		spCarry:       {func() error { return exec(pick(sp.set)) }, save, func() error { return exec(pick(sp.rollback)) }},
		spKept: {func() error { return exec(pick(sp.set)) }, save, func() error {
			if rand.IntN(2) == 0 {
				return nil
			}
			return exec(pick(sp.release))
		}},
		spAfter: {save, func() error { return exec(pick(sp.set)) }, func() error { return exec(pick(sp.rollback)) }},
	}[shape]
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// flushCarried saves, with a new event each, the accounts that still carry
// events a ROLLBACK TO undid in a committed transaction, so that every event
// the writers recorded ends committed or rolled back: none is left pending on
// an account no one saves again. Each is tried until it commits, for at most
// 10s.
func flushCarried(db *gorm.DB, accs []*Account, led *ledger, st *spStats) {
	deadline := time.Now().Add(10 * time.Second)
	for i := range accs {
		for len(accs[i].carried) > 0 && time.Now().Before(deadline) {
			a := accs[i]
			a.Version++
			a.Record(Deposited{AccountID: a.ID, Version: a.Version})
			recs := a.Records()
			id := recs[len(recs)-1].ID.String()
			err := db.Transaction(func(tx *gorm.DB) error { return tx.Save(a).Error })
			led.bookCarried(a.carried, err)
			if led.record([]string{id}, err, false) {
				st.flushed.Add(1)
				st.carriedIn.Add(int64(len(a.carried)))
				a.carried = nil
				continue
			}
			// Not committed: the account's events are gone with the
			// transaction (or their outcome is unknown): reload what
			// committed, and never save this copy again.
			a.carried = nil
			for time.Now().Before(deadline) {
				fresh := &Account{}
				if db.First(fresh, "id = ?", a.ID).Error == nil {
					accs[i] = fresh
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
}

// bookCarried books the events an account carried into a transaction by its
// outcome err, as record does, without counting the writer error again.
func (l *ledger) bookCarried(ids []string, err error) {
	if len(ids) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		now := time.Now()
		for _, id := range ids {
			l.committed[id] = now
		}
	case errors.Is(err, errRollback):
		for _, id := range ids {
			l.rolledBack[id] = struct{}{}
		}
	}
}
