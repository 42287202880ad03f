package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/heraldgo/herald/internal/testkit/tb"
)

// ErrNoBinaries is returned (wrapped) by StartServer when initdb or pg_ctl
// cannot be found, or when run as root without a system user postgres to run
// them as: callers skip their tests then.
var ErrNoBinaries = errors.New("pgtest: cannot run a private PostgreSQL server here")

// Server starts a private PostgreSQL server for the test, with the settings
// given as "name=value" (max_locks_per_transaction=10, say), on a spare port
// of 127.0.0.1, and returns the DSN of its database "postgres" (user
// postgres, trust). The server and its data directory are removed when the
// test ends; only that server is stopped. It needs initdb and pg_ctl on the
// PATH (or in PG_BIN), and, when run as root, the system user postgres to run
// them as; the test is skipped when they are missing.
func Server(t tb.TB, settings ...string) string {
	t.Helper()
	s, err := StartServer(settings...)
	if errors.Is(err, ErrNoBinaries) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop("immediate"); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s.DSN
}

// A PrivateServer is a PostgreSQL server started by StartServer.
type PrivateServer struct {
	// DSN is the URL of its database "postgres" (user postgres, trust).
	DSN string
	// Port is the port it listens on, on 127.0.0.1.
	Port int
	dir  string
	opts string // the server's -o options
	run  func(name string, args ...string) error
	ctl  string
}

// StartServer starts a private PostgreSQL server with the settings given as
// "name=value", on a spare port of 127.0.0.1, in a new temporary directory,
// for callers with no test to tie it to (a TestMain): they must call Stop.
// See Server for what it needs; ErrNoBinaries when that is missing.
func StartServer(settings ...string) (*PrivateServer, error) {
	bin := func(name string) (string, error) {
		if dir := os.Getenv("PG_BIN"); dir != "" {
			return filepath.Join(dir, name), nil
		}
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%w: %s not found: %w", ErrNoBinaries, name, err)
		}
		return p, nil
	}
	initdb, err := bin("initdb")
	if err != nil {
		return nil, err
	}
	pgctl, err := bin("pg_ctl")
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("%w: running as root and no user postgres to run the server as: %w", ErrNoBinaries, err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("", "herald-pg-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*PrivateServer, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	run := func(name string, args ...string) error {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w\n%s", filepath.Base(name), err, out.String())
		}
		return nil
	}
	if err := run(initdb, "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"); err != nil {
		return fail(fmt.Errorf("pgtest: %w", err))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	opts := fmt.Sprintf("-c port=%d -c listen_addresses=127.0.0.1 -c unix_socket_directories='%s' -c fsync=off", port, dir)
	for _, s := range settings {
		opts += " -c " + s
	}
	if err := run(pgctl, "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return fail(fmt.Errorf("pgtest: %w\n%s", err, log))
	}
	s := &PrivateServer{
		DSN:  fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		Port: port, dir: dir, opts: opts, run: run, ctl: pgctl,
	}
	db, err := sql.Open("pgx", s.DSN)
	if err != nil {
		_ = s.Stop("immediate")
		return nil, err
	}
	defer func() { _ = db.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = s.Stop("immediate")
		return nil, fmt.Errorf("pgtest: private server on :%d: %w", port, err)
	}
	return s, nil
}

// Restart stops the server (pg_ctl restart, shutdown mode "fast") and
// starts it again with the same settings and port, as a database restart:
// every connection ends, what was committed stays.
func (s *PrivateServer) Restart() error {
	err := s.run(s.ctl, "-D", filepath.Join(s.dir, "data"), "-o", s.opts, "-l", filepath.Join(s.dir, "log"),
		"-m", "fast", "-w", "-t", "60", "restart")
	if err != nil {
		return fmt.Errorf("pgtest: restart server on :%d: %w", s.Port, err)
	}
	return nil
}

// Stop stops the server (pg_ctl stop on its own data directory, in the
// shutdown mode given: "fast", "immediate") and removes its directory.
func (s *PrivateServer) Stop(mode string) error {
	err := s.run(s.ctl, "-D", filepath.Join(s.dir, "data"), "-m", mode, "-w", "stop")
	_ = os.RemoveAll(s.dir)
	if err != nil {
		return fmt.Errorf("pgtest: stop server on :%d: %w", s.Port, err)
	}
	return nil
}
