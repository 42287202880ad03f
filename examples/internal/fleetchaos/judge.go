package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
)

// readers are the orchestrator's handles for reading the tenants' tables:
// the superuser's pool for the schemas, a pool per SQLite file and MariaDB
// database.
type readers struct {
	adm  *gorm.DB
	own  map[string]*gorm.DB
	refs []tenantRef
}

func newReaders(adm *gorm.DB, mysqlServer string, refs []tenantRef) (*readers, error) {
	r := &readers{adm: adm, own: map[string]*gorm.DB{}, refs: refs}
	for _, t := range refs {
		if t.schema() {
			continue
		}
		db, err := t.open(mysqlServer)
		if err != nil {
			r.close()
			return nil, err
		}
		limitPool(db, t)
		r.own[t.ID] = db
	}
	return r, nil
}

func (r *readers) close() {
	for _, db := range r.own {
		closeDB(db)
	}
}

func (r *readers) db(t tenantRef) *gorm.DB {
	if t.schema() {
		return r.adm
	}
	return r.own[t.ID]
}

// countsSQL are a tenant's deposits, those without an effect, and its events
// pending in the outbox.
func countsSQL(t tenantRef) string {
	return `(SELECT count(*) FROM ` + t.qualify("deposits") + `),
		(SELECT count(*) FROM ` + t.qualify("deposits") + ` d WHERE NOT EXISTS (SELECT 1 FROM ` + t.qualify("effects") + ` e WHERE e.event_id = d.event_id)),
		(SELECT count(*) FROM ` + t.qualify("outbox_messages") + ` WHERE processed_at IS NULL AND dead_at IS NULL)`
}

// tcounts are a tenant's counts (countsSQL).
type tcounts struct{ deposits, unapplied, pending int64 }

// counts reads the counts of the tenants ts: the schemas 25 to a statement.
func (r *readers) counts(ctx context.Context, ts []tenantRef) (map[string]tcounts, error) {
	out := map[string]tcounts{}
	var schemas []string
	flush := func() error {
		if len(schemas) == 0 {
			return nil
		}
		rows, err := r.adm.WithContext(ctx).Raw(strings.Join(schemas, "\nUNION ALL ")).Rows()
		schemas = schemas[:0]
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id string
				c  tcounts
			)
			if err := rows.Scan(&id, &c.deposits, &c.unapplied, &c.pending); err != nil {
				return err
			}
			out[id] = c
		}
		return rows.Err()
	}
	for _, t := range ts {
		if t.schema() {
			if schemas = append(schemas, "SELECT '"+t.ID+"', "+countsSQL(t)); len(schemas) == 25 {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			continue
		}
		var c tcounts
		if err := r.own[t.ID].WithContext(ctx).Raw(`SELECT `+countsSQL(t)).Row().Scan(&c.deposits, &c.unapplied, &c.pending); err != nil {
			return nil, fmt.Errorf("%s: %w", t.ID, err)
		}
		out[t.ID] = c
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// verdict is the ledger of one tenant.
type verdict struct {
	committed        int // deposits committed (the deposits table)
	rolledBack       int // transactions the writers rolled back
	unknown          int // transactions of unknown outcome (the server went down)
	unknownCommitted int // of them, committed
	effects          int // effect rows
	lost             int // committed deposits without an effect
	ghosts           int // effects of deposits that did not commit
	ghostsStream     int // messages in the stream of deposits that did not commit
	dups             int // deposits applied more than once
	orderStream      int // deposits first stored in the stream after a later one of their account
	orderEffects     int // deposits applied after a later one of their account
	pending, dead    int64
	missing          int // committed as the writers saw it, yet no deposit row: the ledger is wrong
	notes            []string
}

func (v verdict) clean() bool {
	return v.lost == 0 && v.ghosts == 0 && v.ghostsStream == 0 && v.dups == 0 && v.orderStream == 0 &&
		v.orderEffects == 0 && v.pending == 0 && v.dead == 0 && v.missing == 0
}

func (v *verdict) add(w verdict) {
	v.committed += w.committed
	v.rolledBack += w.rolledBack
	v.unknown += w.unknown
	v.unknownCommitted += w.unknownCommitted
	v.effects += w.effects
	v.lost += w.lost
	v.ghosts += w.ghosts
	v.ghostsStream += w.ghostsStream
	v.dups += w.dups
	v.orderStream += w.orderStream
	v.orderEffects += w.orderEffects
	v.pending += w.pending
	v.dead += w.dead
	v.missing += w.missing
}

type effectRow struct {
	event, account string
	seq            int
	consumer       string
}

// judge reads tenant t's deposits, effects and outbox, and judges them with
// the writers' ledger and the tenant's messages in the stream (in order).
func judge(ctx context.Context, db *gorm.DB, t tenantRef, tl *tenantLedger, msgs []stored) (verdict, error) {
	var v verdict
	deposits := map[string]deposit{}
	rows, err := db.WithContext(ctx).Raw(`SELECT event_id, account_id, seq FROM ` + t.qualify("deposits")).Rows()
	if err != nil {
		return v, err
	}
	for rows.Next() {
		var (
			id string
			d  deposit
		)
		if err := rows.Scan(&id, &d.account, &d.seq); err != nil {
			rows.Close()
			return v, err
		}
		deposits[id] = d
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return v, err
	}
	v.committed = len(deposits)
	v.rolledBack = len(tl.rolledBack)
	v.unknown = len(tl.unknown)
	for id := range tl.unknown {
		if _, ok := deposits[id]; ok {
			v.unknownCommitted++
		}
	}
	for id := range tl.committed {
		if _, ok := deposits[id]; !ok {
			v.missing++
			v.notes = append(v.notes, "committed without a deposit row: "+id)
		}
	}
	for id := range tl.rolledBack {
		if _, ok := deposits[id]; ok {
			v.missing++
			v.notes = append(v.notes, "rolled back, yet a deposit row: "+id)
		}
	}

	// The effects, in the order they were applied.
	rows, err = db.WithContext(ctx).Raw(`SELECT event_id, account_id, seq, consumer FROM ` + t.qualify("effects") + ` ORDER BY id`).Rows()
	if err != nil {
		return v, err
	}
	applied := map[string]int{}
	top := map[string]int{} // per account, the latest deposit applied so far
	for rows.Next() {
		var e effectRow
		if err := rows.Scan(&e.event, &e.account, &e.seq, &e.consumer); err != nil {
			rows.Close()
			return v, err
		}
		v.effects++
		applied[e.event]++
		if applied[e.event] > 1 {
			v.dups++
			v.notes = append(v.notes, fmt.Sprintf("applied again: %s (account %s, deposit %d, by %s)", e.event, e.account, e.seq, e.consumer))
			continue
		}
		if _, ok := deposits[e.event]; !ok {
			v.ghosts++
			why := "never committed"
			if _, rb := tl.rolledBack[e.event]; rb {
				why = "rolled back"
			}
			v.notes = append(v.notes, fmt.Sprintf("ghost effect: %s (account %s, deposit %d, %s)", e.event, e.account, e.seq, why))
		}
		if e.seq <= top[e.account] {
			v.orderEffects++
			v.notes = append(v.notes, fmt.Sprintf("applied out of order: account %s deposit %d after deposit %d", e.account, e.seq, top[e.account]))
		}
		top[e.account] = max(top[e.account], e.seq)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return v, err
	}
	var lostIDs []string
	for id := range deposits {
		if applied[id] == 0 {
			v.lost++
			lostIDs = append(lostIDs, id)
		}
	}

	// The stream: this tenant's messages, each first occurrence in stream order.
	inStream := map[string]bool{}
	last := map[string]int{}
	for _, m := range msgs {
		inStream[m.id] = true
		if _, ok := deposits[m.id]; !ok {
			v.ghostsStream++
			v.notes = append(v.notes, fmt.Sprintf("ghost in the stream: %s (account %s, deposit %d)", m.id, m.account, m.seq))
		}
		if m.seq < last[m.account] {
			v.orderStream++
			v.notes = append(v.notes, fmt.Sprintf("stored out of order: account %s deposit %d after deposit %d (at %s)",
				m.account, m.seq, last[m.account], m.at.Format("15:04:05.000")))
		}
		last[m.account] = max(last[m.account], m.seq)
	}
	slices.Sort(lostIDs)
	for _, id := range lostIDs {
		d := deposits[id]
		v.notes = append(v.notes, fmt.Sprintf("lost: %s (account %s, deposit %d; in the stream: %v)", id, d.account, d.seq, inStream[id]))
	}

	err = db.WithContext(ctx).Raw(`SELECT
		(SELECT count(*) FROM `+t.qualify("outbox_messages")+` WHERE processed_at IS NULL AND dead_at IS NULL),
		(SELECT count(*) FROM `+t.qualify("outbox_messages")+` WHERE dead_at IS NOT NULL)`).Row().Scan(&v.pending, &v.dead)
	if err != nil {
		return v, err
	}
	if v.pending > 0 || v.dead > 0 {
		v.notes = append(v.notes, fmt.Sprintf("outbox: %d pending, %d dead", v.pending, v.dead))
	}
	return v, nil
}

// judgeAll judges every tenant, four at a time.
func judgeAll(ctx context.Context, r *readers, led *ledger, st streamRead) (map[string]verdict, error) {
	byTenant := map[string][]stored{}
	for _, m := range st.first {
		byTenant[m.tenant] = append(byTenant[m.tenant], m)
	}
	var (
		mu   sync.Mutex
		out  = map[string]verdict{}
		errs []error
		wg   sync.WaitGroup
		next = make(chan tenantRef)
	)
	for range 4 {
		wg.Go(func() {
			for t := range next {
				led.mu.Lock()
				tl := led.tenants[t.ID]
				led.mu.Unlock()
				v, err := judge(ctx, r.db(t), t, tl, byTenant[t.ID])
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("ledger of %s: %w", t.ID, err))
				}
				out[t.ID] = v
				mu.Unlock()
			}
		})
	}
	for _, t := range r.refs {
		next <- t
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return out, nil
}

// quantiles are the quantiles qs of ds (sorted in place).
func quantiles(ds []time.Duration, qs ...float64) []time.Duration {
	out := make([]time.Duration, len(qs))
	if len(ds) == 0 {
		return out
	}
	slices.Sort(ds)
	for i, q := range qs {
		out[i] = ds[min(int(q*float64(len(ds))), len(ds)-1)]
	}
	return out
}

// printNotes prints the first n notes of the unclean tenants to stderr.
func printNotes(refs []tenantRef, vs map[string]verdict, n int) {
	for _, t := range refs {
		v := vs[t.ID]
		if v.clean() {
			continue
		}
		for i, note := range v.notes {
			if i == n {
				fmt.Fprintf(os.Stderr, "fleetchaos: %s: ... %d more\n", t.ID, len(v.notes)-n)
				break
			}
			fmt.Fprintf(os.Stderr, "fleetchaos: %s: %s\n", t.ID, note)
		}
	}
}
