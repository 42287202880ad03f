package events_test

import (
	"testing"

	"github.com/heraldgo/herald/events"
)

type keyedEvent struct{ key string }

func (keyedEvent) EventType() string  { return "keyed" }
func (e keyedEvent) DedupKey() string { return e.key }

type plainEvent struct{}

func (plainEvent) EventType() string { return "plain" }

// DedupMetadata carries a Deduplicated event's non-empty key, and nothing
// for an empty key or another event.
func TestDedupMetadata(t *testing.T) {
	if md := events.DedupMetadata(keyedEvent{"refund:42"}); len(md) != 1 || md[events.MetaDedupKey] != "refund:42" {
		t.Errorf("DedupMetadata = %v", md)
	}
	for _, e := range []events.Event{keyedEvent{}, plainEvent{}, nil} {
		if md := events.DedupMetadata(e); md != nil {
			t.Errorf("DedupMetadata(%#v) = %v, want nil", e, md)
		}
	}
}
