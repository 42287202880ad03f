package relay

import (
	"errors"
	"testing"
	"time"

	"github.com/heraldgo/herald/internal/store"
)

// A batch, as the outage recovery sees it: published rows, and failed rows
// with their attempts before the failure.
func batchOf(at time.Time, ok []string, failedAttempts ...int) *outcome {
	out := &outcome{failedAt: at}
	for _, typ := range ok {
		out.add(&row{Row: store.Row{ID: typ, Topic: "t", Type: typ}}, result{})
	}
	for _, n := range failedAttempts {
		out.add(&row{Row: store.Row{ID: "f", Topic: "t", Type: "a", Attempts: n}}, result{err: errors.New("down"), end: at})
	}
	return out
}

// The rules of the outage recovery: an outage is at least two batches in a row
// that failed and published nothing, one of whose failures was a first
// attempt; the first publishing batch after it opens a recovery that makes due,
// once per topic and type published, the retries of events failed since the
// outage began; the recovery closes after its window.
func TestOutageRules(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // database times
	now := time.Now()
	const window = time.Minute
	cases := []struct {
		name    string
		batches []*outcome
		want    int // keys made due by the last batch
	}{
		{"a streak of one is no outage", []*outcome{batchOf(t0, nil, 0), batchOf(t0, []string{"a"})}, 0},
		{"a streak of retries alone is no outage", []*outcome{batchOf(t0, nil, 3), batchOf(t0, nil, 4), batchOf(t0, []string{"a"})}, 0},
		{"a success breaks the streak", []*outcome{batchOf(t0, nil, 0), batchOf(t0, []string{"b"}, 2), batchOf(t0, nil, 1), batchOf(t0, []string{"a"})}, 0},
		{"two batches with a first attempt are", []*outcome{batchOf(t0, nil, 3), batchOf(t0, nil, 0), batchOf(t0, []string{"a", "a", "b"})}, 2},
		{"batches that tried nothing are neutral", []*outcome{batchOf(t0, nil, 0), {}, batchOf(t0, nil, 5), {}, batchOf(t0, []string{"a"})}, 1},
		{"poison is no publish failure", []*outcome{batchOf(t0, nil, 0), {failed: []failure{{row: &row{}, poison: true}}}, batchOf(t0, []string{"a"})}, 0},
	}
	for _, c := range cases {
		var h health
		var keys []topicType
		for _, b := range c.batches {
			_, keys = h.observe(b, now, window)
		}
		if len(keys) != c.want {
			t.Errorf("%s: %d keys made due (%v), want %d", c.name, len(keys), keys, c.want)
		}
	}

	var h health
	h.observe(batchOf(t0.Add(time.Second), nil, 0), now, window)
	h.observe(batchOf(t0, nil, 1), now, window) // marked earlier (a concurrent batch)
	since, keys := h.observe(batchOf(t0.Add(2*time.Second), []string{"a"}), now, window)
	if !since.Equal(t0) || len(keys) != 1 {
		t.Fatalf("since %v, keys %v: want the streak's earliest failure and one key", since, keys)
	}
	if _, keys := h.observe(batchOf(t0, []string{"a", "b"}), now.Add(time.Second), window); len(keys) != 1 || keys[0].typ != "b" {
		t.Fatalf("keys %v: want b alone (a was made due already)", keys)
	}
	h.forget(since, []topicType{{"t", "a"}})
	if _, keys := h.observe(batchOf(t0, []string{"a"}), now.Add(time.Second), window); len(keys) != 1 {
		t.Fatalf("keys %v: a forgotten key is made due again", keys)
	}
	if _, keys := h.observe(batchOf(t0, []string{"c"}), now.Add(window+time.Second), window); len(keys) != 0 {
		t.Fatalf("keys %v after the recovery closed", keys)
	}
}
