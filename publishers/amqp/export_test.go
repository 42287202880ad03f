package amqp

// LocalAddr is the local address of p's current connection ("" when it has
// none): the tests close that connection from the broker's side.
func LocalAddr(p *Publisher) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil || p.conn.conn.IsClosed() {
		return ""
	}
	return p.conn.conn.LocalAddr().String()
}
