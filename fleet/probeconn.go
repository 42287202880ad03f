package fleet

import (
	"context"
	"database/sql"
	"maps"
	"sync"
	"time"

	"gorm.io/gorm"
)

// probeConn is the connection the fleet keeps for the probes of the tenants
// of one shared pool (Tenant.DB), so that they all run on one server
// process. On PostgreSQL a server process's first statement on a table
// loads the table's and its indexes' descriptions and plans with them: a
// probe of 100 tenant schemas took 70-90 ms on a process new to them, 12-17
// ms on one that had probed them before (2026-12-07). On probes spread over
// the pool's connections, every probe of a tenant ran on a process new to
// it. The connection is taken from the pool at the pool's first probe and
// held between probes (an idle connection of the pool, counted in MaxConns
// only while a probe uses it); a probe that fails on it lets it go, and the
// next probe takes another. It is given back after probeConnAge, so that
// the pool's own limits (SetConnMaxLifetime) and the server process's
// caches (about 100 kB a tenant on PostgreSQL) do not grow old with it.
// Probes of one pool take turns on it.
type probeConn struct {
	mu    sync.Mutex // held by the probe using conn
	conn  *sql.Conn  // nil until the next probe takes one
	taken time.Time  // when conn was taken from the pool
}

// probeConnAge is how long the fleet keeps a probe connection.
const probeConnAge = 10 * time.Minute

// probeConnOf returns the probe connection of the shared pool db, made on
// first use.
func (f *Fleet) probeConnOf(db *gorm.DB) *probeConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	pc := f.probeConns[db]
	if pc == nil {
		if f.probeConns == nil {
			f.probeConns = map[*gorm.DB]*probeConn{}
		}
		pc = &probeConn{}
		f.probeConns[db] = pc
	}
	return pc
}

// take returns the held connection, taking one from pool when none is held;
// the caller holds pc.mu.
func (pc *probeConn) take(ctx context.Context, pool *sql.DB) (*sql.Conn, error) {
	if pc.conn != nil && time.Since(pc.taken) >= probeConnAge {
		pc.drop()
	}
	if pc.conn == nil {
		c, err := pool.Conn(ctx)
		if err != nil {
			return nil, err
		}
		pc.conn, pc.taken = c, time.Now()
	}
	return pc.conn, nil
}

// drop gives the held connection back to its pool, if any (a probe on it
// failed, or the fleet ends: the pool discards a broken one); the caller
// holds pc.mu.
func (pc *probeConn) drop() {
	if pc.conn != nil {
		_ = pc.conn.Close()
		pc.conn = nil
	}
}

// closeProbeConns lets every probe connection go, at the end of Run. (A
// probe takes its connection's lock before the fleet's: so here.)
func (f *Fleet) closeProbeConns() {
	f.mu.Lock()
	pcs := maps.Values(f.probeConns)
	f.probeConns = nil
	f.mu.Unlock()
	for pc := range pcs {
		pc.mu.Lock()
		pc.drop()
		pc.mu.Unlock()
	}
}
