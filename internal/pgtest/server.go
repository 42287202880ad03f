package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Server starts a private PostgreSQL server for the test, with the settings
// given as "name=value" (max_locks_per_transaction=10, say), on a spare port
// of 127.0.0.1, and returns the DSN of its database "postgres" (user
// postgres, trust). The server and its data directory are removed when the
// test ends; only that server is stopped. It needs initdb and pg_ctl on the
// PATH (or in PG_BIN), and, when run as root, the system user postgres to run
// them as; the test is skipped when they are missing.
func Server(t testing.TB, settings ...string) string {
	t.Helper()
	bin := func(name string) string {
		if dir := os.Getenv("PG_BIN"); dir != "" {
			return filepath.Join(dir, name)
		}
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("pgtest: %s not found: %v", name, err)
		}
		return p
	}
	initdb, pgctl := bin("initdb"), bin("pg_ctl")
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("pgtest: running as root and no user postgres to run the server as: %v", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("", "herald-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
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
		t.Fatalf("pgtest: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	opts := fmt.Sprintf("-c port=%d -c listen_addresses=127.0.0.1 -c unix_socket_directories='%s' -c fsync=off", port, dir)
	for _, s := range settings {
		opts += " -c " + s
	}
	if err := run(pgctl, "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("pgtest: %v\n%s", err, log)
	}
	t.Cleanup(func() {
		if err := run(pgctl, "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("pgtest: private server on :%d: %v", port, err)
	}
	return dsn
}
