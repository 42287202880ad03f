package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// child is a fleet or consumer process, started again by its supervisor when
// it dies. A fleet process started again takes a new member name every other
// time (the others see a member leave and one join), and its old one the
// other times (it finds its own partition leases).
type child struct {
	role string
	slot int

	mu       sync.Mutex
	cmd      *exec.Cmd
	gen      int    // how many times it was started again
	instance string // its member name (fleet)
	killed   bool   // the orchestrator SIGKILLed the current process
}

// children supervises the run's child processes.
type children struct {
	self     string // this binary
	base     childConfig
	list     []*child
	stopping atomic.Bool
	wg       sync.WaitGroup
	restarts atomic.Int64
	crashes  atomic.Int64 // exits the orchestrator did not cause
}

// start starts c and starts it again, after 200ms, each time it exits, until
// stop.
func (cs *children) start(c *child) {
	cs.list = append(cs.list, c)
	cs.wg.Go(func() {
		for first := true; !cs.stopping.Load(); first = false {
			if !first {
				cs.restarts.Add(1)
				time.Sleep(200 * time.Millisecond)
			}
			cfg := cs.base
			cfg.Role, cfg.Slot = c.role, c.slot
			c.mu.Lock()
			if !first {
				c.gen++
			}
			if c.role == roleFleet && (c.instance == "" || c.gen%2 == 1) {
				c.instance = fmt.Sprintf("fleet%d-%d", c.slot, c.gen)
			} else if c.role == roleConsumer {
				c.instance = fmt.Sprintf("consumer%d-%d", c.slot, c.gen)
			}
			cfg.Instance = c.instance
			c.mu.Unlock()
			env, err := cfg.env()
			if err != nil {
				fmt.Fprintln(os.Stderr, "fleetchaos:", err)
				return
			}
			cmd := exec.Command(cs.self, c.role)
			cmd.Env = append(os.Environ(), env)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			// A child dies with the orchestrator, however it ends.
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			c.mu.Lock()
			if cs.stopping.Load() || cmd.Start() != nil {
				c.mu.Unlock()
				return
			}
			c.cmd, c.killed = cmd, false
			c.mu.Unlock()
			err = cmd.Wait()
			if c.role == roleFleet {
				markExit(cs.base.Dir, cfg.Instance, cmd.Process.Pid)
			}
			c.mu.Lock()
			killed := c.killed
			c.cmd = nil
			c.mu.Unlock()
			if err != nil && !killed && !cs.stopping.Load() {
				cs.crashes.Add(1)
				fmt.Fprintf(os.Stderr, "fleetchaos: %s %d (%s) exited by itself: %v\n", c.role, c.slot, cfg.Instance, err)
			}
		}
	})
}

// kill SIGKILLs c's process, by its pid, and reports whether there was one.
func (c *child) kill() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return false
	}
	c.killed = true
	return c.cmd.Process.Signal(syscall.SIGKILL) == nil
}

// signal sends sig to c's process, if it has one.
func (c *child) signal(sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(sig)
	}
}

// stop ends every child: SIGTERM, then SIGKILL after 15s; their supervisors
// start them no more.
func (cs *children) stop() {
	cs.stopping.Store(true)
	for _, c := range cs.list {
		c.signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, c := range cs.list {
		for {
			c.mu.Lock()
			running := c.cmd != nil
			c.mu.Unlock()
			if !running {
				break
			}
			if time.Now().After(deadline) {
				c.kill()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cs.wg.Wait()
}

// of returns the children of role.
func (cs *children) of(role string) []*child {
	var out []*child
	for _, c := range cs.list {
		if c.role == role {
			out = append(out, c)
		}
	}
	return out
}

// markExit ends a fleet process's status file with the time it exited (a
// SIGKILLed process cannot): "# exit unixnano".
func markExit(dir, instance string, pid int) {
	f, err := os.OpenFile(filepath.Join(statusDir(dir), fmt.Sprintf("%s-%d", instance, pid)), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return // it wrote none
	}
	_, _ = fmt.Fprintf(f, "# exit %d\n", time.Now().UnixNano())
	_ = f.Close()
}
