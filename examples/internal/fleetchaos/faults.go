package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/internal/pgtest"
)

// server is the run's PostgreSQL server, which the outages stop and start.
type server struct {
	*pgtest.PrivateServer
	data string // its data directory (SHOW data_directory)
}

// postmaster is the server's postmaster's pid (its data directory's
// postmaster.pid).
func (s *server) postmaster() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// outage stops the server (an immediate shutdown: SIGQUIT to its postmaster,
// by pid, as a crash would), waits for it to be gone, keeps it down for the
// rest of d, and starts it again (with its settings and port). It returns
// how long the server was down.
func (s *server) outage(d time.Duration) (time.Duration, error) {
	pid, err := s.postmaster()
	if err != nil {
		return 0, fmt.Errorf("outage: %w", err)
	}
	began := time.Now()
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return 0, fmt.Errorf("outage: signal the postmaster %d: %w", pid, err)
	}
	for syscall.Kill(pid, 0) == nil { // until the postmaster is gone
		if time.Since(began) > 30*time.Second {
			return 0, fmt.Errorf("outage: postmaster %d still running after 30s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Until(began.Add(d)))
	// pg_ctl restart starts a server that is not running, with the options
	// it was started with.
	for i := 0; ; i++ {
		err = s.Restart()
		if err == nil || i == 2 {
			break
		}
		time.Sleep(time.Second)
	}
	return time.Since(began), err
}

// revokeFault is the run's grant fault: one tenant's grants revoked from the
// fleet's role for a while, then given back.
type revokeFault struct {
	tenant      string
	from, until time.Time
	pendingAt   int64 // the tenant's pending events when its grants came back
	err         error
}

// revoke revokes tenant's grants from the fleet's role, waits d, and gives
// them back; each step is tried until it succeeds, for at most 30s (the
// server may be starting still).
func revoke(adm *gorm.DB, tenant string, d time.Duration) *revokeFault {
	f := &revokeFault{tenant: tenant}
	exec := func(qs []string) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := adm.Transaction(func(tx *gorm.DB) error {
				for _, q := range qs {
					if err := tx.Exec(q).Error; err != nil {
						return fmt.Errorf("%s: %w", q, err)
					}
				}
				return nil
			})
			if err == nil || time.Now().After(deadline) {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if f.err = exec(grants(tenant, true)); f.err != nil {
		return f
	}
	f.from = time.Now()
	time.Sleep(d)
	_ = adm.Raw(`SELECT count(*) FROM ` + tenant + `.outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL`).Row().Scan(&f.pendingAt)
	if f.err = exec(grants(tenant, false)); f.err == nil {
		f.until = time.Now()
	}
	return f
}
