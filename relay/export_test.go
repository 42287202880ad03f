package relay

// SetAfterPublish installs a fault point between the broker's ack and the mark:
// when f returns an error, the marks of that batch are not written, as if the
// process died there.
func SetAfterPublish(r *Relay, f func() error) { r.hooks.afterPublish = f }
