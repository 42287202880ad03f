// Package tcpproxy is a TCP proxy for the tests and the chaos run that take a
// server away and give it back without touching it (the servers here are
// shared): Down closes every proxied connection and refuses new ones, Up
// accepts again.
package tcpproxy

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards the connections to Addr to a target server.
type Proxy struct {
	Addr   string // host:port to connect to instead of the server
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu    sync.Mutex
	up    bool
	conns map[net.Conn]bool
}

// Start proxies a free local port to target (host:port), up. Close stops it.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, up: true, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.isUp() {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if !p.up { // went down while dialing
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			continue
		}
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(c, s)
		go pipe(s, c)
	}
}

func (p *Proxy) isUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up
}

// Down drops every proxied connection and refuses new ones until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = false
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Up accepts connections again.
func (p *Proxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = true
}

// Close stops accepting and drops every proxied connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Down()
	p.wg.Wait()
}
