package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The burn-down to a broker runs three programs on one machine: the
// database server, the broker and the relay (this process). What each
// scenario costs the machine tells whether a figure is bound by the
// machine's cores rather than by the relay: a relay that does what the SQL
// reference does and what the broker reference does can go no faster than
// the cores divided by the CPU time of both per event.

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// serverNames are the broker processes counted by name (the databases are
// MySQL's mariadbd or mysqld and the PostgreSQL cluster on 5432, counted by
// its postmaster's process tree: other PostgreSQL servers on the machine,
// tests' own, are left out).
var serverNames = map[string]bool{"nats-server": true, "beam.smp": true, "redis-server": true}

// procCPU reads a process's CPU times from /proc/<pid>/stat: its own (user +
// system) and its reaped children's, with its parent's pid and its name.
func procCPU(pid string) (own, children time.Duration, ppid, name string, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, 0, "", "", false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return 0, 0, "", "", false
	}
	name = s[open+1 : end]
	f := strings.Fields(s[end+1:]) // f[0] is the state (field 3)
	if len(f) < 15 {
		return 0, 0, "", "", false
	}
	ticks := func(i int) time.Duration { n, _ := strconv.ParseInt(f[i], 10, 64); return time.Duration(n) * clockTick }
	// Fields 14-17 (utime, stime, cutime, cstime) are f[11..14].
	return ticks(11) + ticks(12), ticks(13) + ticks(14), f[1], name, true
}

// cpuUse is CPU time by program: this process (the relay or the
// reference's client), the database server, the broker.
type cpuUse struct{ self, db, broker time.Duration }

func (c cpuUse) total() time.Duration { return c.self + c.db + c.broker }

func (c cpuUse) sub(d cpuUse) cpuUse {
	return cpuUse{c.self - d.self, c.db - d.db, c.broker - d.broker}
}

func (c cpuUse) per(n int) cpuUse {
	d := time.Duration(n)
	return cpuUse{c.self / d, c.db / d, c.broker / d}
}

// machineCPU is the CPU time used so far by this process, the PostgreSQL
// cluster on 5432 (its postmaster, the backends it reaped, the live ones)
// and MySQL, and the brokers named in serverNames.
func machineCPU() cpuUse {
	var total cpuUse
	if own, _, _, _, ok := procCPU("self"); ok {
		total.self = own
	}
	postmaster := ""
	if b, err := os.ReadFile("/var/run/postgresql/.s.PGSQL.5432.lock"); err == nil {
		postmaster = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		own, reaped, ppid, name, ok := procCPU(pid)
		switch {
		case !ok:
		case pid == postmaster:
			total.db += own + reaped
		case postmaster != "" && ppid == postmaster, name == "mariadbd", name == "mysqld":
			total.db += own
		case serverNames[name]:
			total.broker += own
		}
	}
	return total
}
