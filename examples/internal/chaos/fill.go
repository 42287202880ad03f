package main

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

// fillRoom is how many more messages a stream the -fill-stream fault makes
// full takes before JetStream refuses publishes (DiscardNew).
const fillRoom = 100

// fillFor is how long the streams stay full.
const fillFor = 4 * time.Second

// fill makes the topics' streams full: a MaxMsgs of fillRoom over what they
// hold, DiscardNew (JetStream then refuses a publish with "maximum messages
// exceeded"). restore gives them their configuration back.
func (b *natsBroker) fill(topics []string) (restore func() error, err error) {
	nc, err := nats.Connect(b.srv.URL(), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	js, err := nc.JetStream()
	if err != nil {
		nc.Close()
		return nil, err
	}
	var orig []nats.StreamConfig
	restore = func() error {
		defer nc.Close()
		var first error
		for _, cfg := range orig {
			if _, err := js.UpdateStream(&cfg); err != nil && first == nil {
				first = fmt.Errorf("chaos: give stream %s room again: %w", cfg.Name, err)
			}
		}
		return first
	}
	for _, t := range topics {
		info, err := js.StreamInfo(t)
		if err != nil {
			_ = restore()
			return nil, err
		}
		orig = append(orig, info.Config)
		cfg := info.Config
		cfg.Discard, cfg.MaxMsgs = nats.DiscardNew, int64(info.State.Msgs)+fillRoom
		if _, err := js.UpdateStream(&cfg); err != nil {
			_ = restore()
			return nil, fmt.Errorf("chaos: fill stream %s: %w", t, err)
		}
	}
	return restore, nil
}

// atLimit counts the topics' streams that hold their MaxMsgs.
func (b *natsBroker) atLimit(topics []string) int {
	nc, err := nats.Connect(b.srv.URL(), nats.Timeout(2*time.Second))
	if err != nil {
		return -1
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return -1
	}
	n := 0
	for _, t := range topics {
		if info, err := js.StreamInfo(t); err == nil && info.Config.MaxMsgs > 0 && int64(info.State.Msgs) >= info.Config.MaxMsgs {
			n++
		}
	}
	return n
}

// fillStreams is the -fill-stream fault: the streams made full, a burst of
// events written, and room given back after fillFor. It never overlaps an
// outage or a refusal window (f.mu).
func (f *faults) fillStreams() {
	f.mu.Lock()
	defer f.mu.Unlock()
	nb, ok := f.brk.(*natsBroker)
	if !ok {
		return
	}
	restore, err := nb.fill(f.env.topics)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		f.fillStat = "failed: " + err.Error()
		return
	}
	ids, err := f.burst()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: burst:", err)
	}
	time.Sleep(fillFor)
	full := nb.atLimit(f.env.topics)
	var unmarked int64
	if len(ids) > 0 {
		_ = f.q.Raw(`SELECT count(*) FROM outbox_messages WHERE id IN ?
			AND processed_at IS NULL AND dead_at IS NULL`, ids).Row().Scan(&unmarked)
	}
	if err := restore(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	f.fillStat = fmt.Sprintf("%d of %d streams at their limit at the end, %d of the burst's %d events unpublished", full, len(f.env.topics), unmarked, len(ids))
	f.filled = full > 0
	fmt.Fprintf(os.Stderr, "chaos: streams given room again: %s\n", f.fillStat)
}
