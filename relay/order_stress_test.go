package relay_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/relay"
)

// flakyPublisher fails messages at random (one in failOneIn), and now and
// then a whole call (one in callOneIn), and records each message's first
// successful publish, in order.
type flakyPublisher struct {
	mu                   sync.Mutex
	failOneIn, callOneIn int
	first                map[string]bool
	order                map[uuid.UUID][]int // each account's Seqs, by first publish
}

func (p *flakyPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rand.IntN(p.callOneIn) == 0 {
		return errors.New("flaky: call failed")
	}
	for _, m := range msgs {
		if rand.IntN(p.failOneIn) == 0 {
			return fmt.Errorf("flaky: message %s failed", m.UUID)
		}
		var d Deposited
		if err := json.Unmarshal(m.Payload, &d); err == nil && poisoned(d.Seq) {
			return fmt.Errorf("%w: flaky: message %s poisoned", relay.ErrRejected, m.UUID)
		}
	}
	for _, m := range msgs {
		if p.first[m.UUID] {
			continue
		}
		p.first[m.UUID] = true
		var d Deposited
		if err := json.Unmarshal(m.Payload, &d); err != nil {
			return err
		}
		p.order[d.AccountID] = append(p.order[d.AccountID], d.Seq)
	}
	return nil
}

func (p *flakyPublisher) Close() error { return nil }

// poisoned is the events the flaky publisher always refuses: they die.
func poisoned(seq int) bool { return seq%40 == 17 }

// An ordered relay whose publisher fails messages and calls at random, with
// backoffs of milliseconds (retries due while the claims move on), under live
// writes: every event is published, and each account's events are first
// published in commit order; the poisoned ones die (MaxAttempts 3), and
// release their aggregate's later events.
func TestOrderedFlakyPublisherKeepsOrder(t *testing.T) {
	e := newEnv(t)
	pub := &flakyPublisher{failOneIn: 12, callOneIn: 30, first: map[string]bool{}, order: map[uuid.UUID][]int{}}
	// Two instances, sharing the partitions.
	for _, id := range []string{"a", "b"} {
		r, err := relay.New(e.db, pub, relay.Config{Ordered: true, Partitions: 4, InstanceID: id,
			PollInterval: 5 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 30 * time.Millisecond,
			MaxAttempts: 3, SweepInterval: time.Hour, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		e.run(r)
	}
	const writers, accounts = 4, 40
	var (
		wg    sync.WaitGroup
		total = make([]int, writers)
	)
	stop := time.Now().Add(5 * time.Second)
	for w := range writers {
		wg.Go(func() {
			accs := make([]*Account, accounts/writers)
			seqs := make([]int, len(accs))
			for i := range accs {
				accs[i] = &Account{ID: uuid.New()}
			}
			for time.Now().Before(stop) {
				i := rand.IntN(len(accs))
				for range 1 + rand.IntN(3) {
					accs[i].Record(Deposited{AccountID: accs[i].ID, Seq: seqs[i]})
					if !poisoned(seqs[i]) {
						total[w]++
					}
					seqs[i]++
				}
				if err := e.db.Save(accs[i]).Error; err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	want := 0
	for _, n := range total {
		want += n
	}
	// Random failures of whole calls strike every event of the call when a
	// later call of the batch succeeds: some unpoisoned events die too.
	eventually(t, 60*time.Second, "every event published or dead", func() bool { return e.pending() == 0 })
	pub.mu.Lock()
	defer pub.mu.Unlock()
	violations := 0
	for acc, seqs := range pub.order {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				violations++
				if violations <= 5 {
					t.Errorf("account %s: Seq %d first published after Seq %d (%v)", acc, seqs[i], seqs[i-1], seqs)
				}
			}
		}
	}
	t.Logf("%d events of %d accounts published, %d unpoisoned written; %d order violations", len(pub.first), len(pub.order), want, violations)
}
