package relay

// logFailures logs the batch's failures, per topic and at most once per 30s
// per topic: the events that will be retried, and those that went dead.
func (r *Relay) logFailures(out *outcome, dead map[string]bool) {
	type tally struct {
		n    int
		last failure
	}
	var topics []string
	retrying, died := map[string]*tally{}, map[string]*tally{}
	for _, f := range out.failed {
		m := retrying
		if dead[f.row.ID] {
			m = died
		}
		t := m[f.row.Topic]
		if t == nil {
			if retrying[f.row.Topic] == nil && died[f.row.Topic] == nil {
				topics = append(topics, f.row.Topic)
			}
			t = &tally{}
			m[f.row.Topic] = t
		}
		t.n++
		t.last = f
	}
	for _, topic := range topics {
		if t := retrying[topic]; t != nil {
			if ok, suppressed := r.failLog.allow(topic); ok {
				r.log.Warn("publish failed; will retry", "topic", topic, "events", t.n, "event_id", t.last.row.ID,
					"attempts", t.last.row.Attempts+1, "err", t.last.err, "suppressed", suppressed)
			}
		}
		if t := died[topic]; t != nil {
			if ok, suppressed := r.deadLog.allow(topic); ok {
				r.log.Warn("events are dead after their last attempt; see admin.Outbox.Dead", "topic", topic, "events", t.n,
					"event_id", t.last.row.ID, "attempts", t.last.row.Attempts+1, "last_error", t.last.err, "suppressed", suppressed)
			}
		}
	}
}
