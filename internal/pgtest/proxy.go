package pgtest

import (
	"github.com/heraldgo/herald/internal/tcpproxy"
	"github.com/heraldgo/herald/internal/testkit/tb"
)

// Proxy is a TCP proxy to a server, for tests that take the database away and
// give it back without touching the shared server (see tcpproxy).
type Proxy = tcpproxy.Proxy

// StartProxy proxies a free local port to target (host:port). It is closed when
// the test ends.
func StartProxy(t tb.TB, target string) *Proxy {
	t.Helper()
	p, err := tcpproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
