package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/outbound"
	"github.com/heraldgo/herald/outboxhook"
)

// Account is a tenant's aggregate: every save records Deposited with the
// account's next number (Version), so the consumers and the ledger can tell
// the order.
type Account struct {
	ID      uuid.UUID `gorm:"primaryKey"`
	Version int
	aggregate.Root
}

// Deposited is the run's event.
type Deposited struct {
	AccountID uuid.UUID `json:"account_id"`
	Seq       int       `json:"seq"`
}

func (Deposited) EventType() string { return "fleetchaos.deposited" }

// Deposit is the writers' record of a deposit, in the transaction that
// saves it: what committed, whatever the writer saw (a commit whose outcome
// it could not know, while the server went down).
type Deposit struct {
	EventID   string `gorm:"primaryKey"`
	AccountID string
	Seq       int
}

var errRollback = errors.New("fleetchaos: deliberate rollback")

// discard is a logger that drops everything.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// deposit is one event the writers recorded.
type deposit struct {
	account string
	seq     int
	at      time.Time // when its transaction returned
}

// ledger is what the writers know, per tenant: the events of committed
// transactions, of rolled-back ones, and of those whose outcome is unknown
// (the server went down under them; the deposits table settles them).
type ledger struct {
	mu      sync.Mutex
	tenants map[string]*tenantLedger
	errs    atomic.Int64 // writer errors (outcome unknown)
}

type tenantLedger struct {
	committed, rolledBack, unknown map[string]deposit
}

func newLedger(tenants []tenantRef) *ledger {
	l := &ledger{tenants: map[string]*tenantLedger{}}
	for _, t := range tenants {
		l.tenants[t.ID] = &tenantLedger{committed: map[string]deposit{}, rolledBack: map[string]deposit{}, unknown: map[string]deposit{}}
	}
	return l
}

// record books event id of tenant by its transaction's outcome err.
func (l *ledger) record(tenant, id string, d deposit, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tl := l.tenants[tenant]
	switch {
	case err == nil:
		tl.committed[id] = d
	case errors.Is(err, errRollback):
		tl.rolledBack[id] = d
	default:
		tl.unknown[id] = d
		if n := l.errs.Add(1); n <= 3 {
			fmt.Fprintf(os.Stderr, "fleetchaos: writer error (outcome unknown) on %s: %v\n", tenant, err)
		}
	}
}

// counts returns the events committed, rolled back and of unknown outcome.
func (l *ledger) counts() (committed, rolledBack, unknown int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, tl := range l.tenants {
		committed += len(tl.committed)
		rolledBack += len(tl.rolledBack)
		unknown += len(tl.unknown)
	}
	return
}

// commitTimes returns when each committed event's transaction returned.
func (l *ledger) commitTimes() map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]time.Time{}
	for _, tl := range l.tenants {
		for id, d := range tl.committed {
			out[id] = d.at
		}
	}
	return out
}

// wtenant is a tenant as the writers see it: its handle with the outbox hook,
// and an account per writer (writer w alone saves accounts[w]).
type wtenant struct {
	ref      tenantRef
	db       *gorm.DB
	accounts []*Account
}

// writerTenants opens each tenant's handle for the writers: the schemas
// through the writers' pool (a handle each, whose tables are the schema's),
// the SQLite files and the MariaDB databases (on mysqlServer) a pool each.
// It returns them and a function that closes the pools of their own.
func writerTenants(pool *gorm.DB, mysqlServer string, refs []tenantRef, accounts map[string][]uuid.UUID, topic string) ([]*wtenant, func(), error) {
	var (
		out   []*wtenant
		owned []*gorm.DB
	)
	closeAll := func() {
		for _, db := range owned {
			closeDB(db)
		}
	}
	for _, t := range refs {
		var (
			db  *gorm.DB
			err error
		)
		if t.schema() {
			db, err = onPool(pool, t.ID+".")
		} else {
			db, err = t.open(mysqlServer)
			if err == nil {
				owned = append(owned, db)
				limitPool(db, t)
			}
		}
		if err == nil {
			err = db.Use(outboxhook.New(outboxhook.Config{Table: t.qualify("outbox_messages"), DisableAutoCreate: true,
				Topic: func(*events.Envelope) string { return topic }}))
		}
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("writers: tenant %s: %w", t.ID, err)
		}
		wt := &wtenant{ref: t, db: db}
		for _, id := range accounts[t.ID] {
			wt.accounts = append(wt.accounts, &Account{ID: id})
		}
		out = append(out, wt)
	}
	return out, closeAll, nil
}

// picker chooses the tenant of each transaction: one of the first hot
// tenants with probability share, else any other.
type picker struct {
	n, hot int
	share  float64
}

func (p picker) pick() int {
	if p.hot > 0 && (p.hot == p.n || rand.Float64() < p.share) {
		return rand.IntN(p.hot)
	}
	return p.hot + rand.IntN(p.n-p.hot)
}

// writer saves writer w's account of a tenant picked for each transaction,
// one deposit each, 10% of them rolled back after recording their event,
// until ctx is done; the writers together begin at most rate transactions a
// second.
func writer(ctx context.Context, w, writers, rate int, ts []*wtenant, pk picker, led *ledger) {
	every := time.Duration(float64(time.Second) * float64(writers) / float64(rate))
	next := time.Now().Add(time.Duration(rand.Int64N(int64(every)))) // the writers out of step
	for ctx.Err() == nil {
		next = next.Add(every)
		if wait := time.Until(next); wait > 0 {
			if !outbound.Sleep(ctx, wait) {
				return
			}
		} else if -wait > every {
			next = time.Now() // behind (a slow commit, the server down): no catching up in a rush
		}
		t := ts[pk.pick()]
		a := t.accounts[w]
		a.Version++
		a.Record(Deposited{AccountID: a.ID, Seq: a.Version})
		// Only the event recorded now: earlier ones may still be pending on
		// the aggregate (committed in a transaction whose end the hook did
		// not see; the next save settles them).
		recs := a.Records()
		id := recs[len(recs)-1].ID.String()
		rollback := rand.IntN(10) == 0
		err := t.db.WithContext(context.Background()).Transaction(func(tx *gorm.DB) error {
			if err := tx.Save(a).Error; err != nil {
				return err
			}
			if err := tx.Create(&Deposit{EventID: id, AccountID: a.ID.String(), Seq: a.Version}).Error; err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
		led.record(t.ref.ID, id, deposit{account: a.ID.String(), seq: a.Version, at: time.Now()}, err)
		if err == nil {
			continue
		}
		// Forget the in-memory aggregate: reload what committed. It still
		// holds the events of the transaction that did not commit, which its
		// next save would write again (ghosts): never save it again. Until
		// the reload succeeds (the server may be down), or the writer stops.
		for {
			fresh := &Account{}
			if t.db.First(fresh, "id = ?", a.ID).Error == nil {
				t.accounts[w] = fresh
				break
			}
			if !outbound.Sleep(ctx, 100*time.Millisecond) {
				return
			}
		}
	}
}

// limitPool caps the pool of a tenant of its own database: SQLite's one
// writer; MariaDB's a few, the run's processes sharing the server's
// connections.
func limitPool(db *gorm.DB, t tenantRef) {
	if s, err := db.DB(); err == nil {
		s.SetMaxOpenConns(1)
		if t.MySQL != "" {
			s.SetMaxOpenConns(2)
		}
	}
}
