package relay

import (
	"sync"
	"time"
)

// limiter lets a log line through at most once per interval, counting the rest.
type limiter struct {
	mu       sync.Mutex
	every    time.Duration
	last     time.Time
	dropped  int
	reported int
}

func newLimiter(every time.Duration) *limiter { return &limiter{every: every} }

func (l *limiter) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.last.IsZero() || now.Sub(l.last) >= l.every {
		l.last, l.reported, l.dropped = now, l.dropped, 0
		return true
	}
	l.dropped++
	return false
}

// suppressed is how many lines were dropped before the last one allowed.
func (l *limiter) suppressed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reported
}

// topicLimiter is a limiter per topic, for log lines about one topic's
// events: a failing topic does not hide another's. It keeps at most max
// topics; the others share one limiter.
type topicLimiter struct {
	mu       sync.Mutex
	every    time.Duration
	max      int
	byTopic  map[string]*limiter
	overflow *limiter
}

// maxLogTopics bounds the topics a topicLimiter tells apart.
const maxLogTopics = 1000

func newTopicLimiter(every time.Duration, maxTopics int) *topicLimiter {
	return &topicLimiter{every: every, max: maxTopics, byTopic: map[string]*limiter{}, overflow: newLimiter(every)}
}

// allow reports whether a line about topic may be logged now, and how many
// lines about it were dropped before this one.
func (t *topicLimiter) allow(topic string) (bool, int) {
	t.mu.Lock()
	l := t.byTopic[topic]
	if l == nil {
		l = t.overflow
		if len(t.byTopic) < t.max {
			l = newLimiter(t.every)
			t.byTopic[topic] = l
		}
	}
	t.mu.Unlock()
	if !l.allow() {
		return false, 0
	}
	return true, l.suppressed()
}
