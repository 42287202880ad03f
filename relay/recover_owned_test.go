package relay_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/relay"
)

// rolePublisher refuses everything while down, and the message with id once.
type rolePublisher struct {
	message.Publisher
	down atomic.Bool
	mu   sync.Mutex
	once string // refused on its first attempt
}

func (p *rolePublisher) refuseOnce(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.once = id
}

func (p *rolePublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.down.Load() {
		return fmt.Errorf("broker down")
	}
	p.mu.Lock()
	for _, m := range msgs {
		if m.UUID == p.once {
			p.once = ""
			p.mu.Unlock()
			return fmt.Errorf("refused once")
		}
	}
	p.mu.Unlock()
	return p.Publisher.Publish(topic, msgs...)
}

// Two ordered instances: when one's publisher comes back after an outage, it
// makes due at once only the waiting retries of its own partitions. The
// other instance claims past its own waiting retries (it keeps a position
// and remembers when each is due), so a retry made due early there could let
// the next event of its aggregate be claimed first. Here the other
// instance's event waits out its own backoff, and is published before the
// next one of its aggregate.
func TestOutageRecoveryKeepsOtherInstancesOrder(t *testing.T) {
	e := newEnv(t)
	gc := newGoChannel()
	got := consume(t, gc, "account.deposited")
	pubs := map[string]*rolePublisher{"a": {Publisher: gc}, "b": {Publisher: gc}}
	for _, id := range []string{"a", "b"} {
		r, err := relay.New(e.db, pubs[id], relay.Config{Ordered: true, Partitions: 2, InstanceID: id,
			PollInterval: 20 * time.Millisecond, SweepInterval: time.Hour, MaxAttempts: 100,
			MinBackoff: 4 * time.Second, MaxBackoff: 4 * time.Second,
			LeaseDuration: 3 * time.Second, PublishTimeout: time.Second, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		e.run(r)
	}
	// Each instance holds one of the two partitions.
	owner := map[int]string{}
	eventually(t, 20*time.Second, "one partition each", func() bool {
		var rows []struct {
			Partition int
			Owner     string
		}
		if err := e.db.Raw(`SELECT partition, owner FROM outbox_messages_leases WHERE expires_at > now()`).Scan(&rows).Error; err != nil {
			return false // not created yet
		}
		clear(owner)
		for _, r := range rows {
			owner[r.Partition] = r.Owner
		}
		return len(owner) == 2 && owner[0] != owner[1]
	})
	partOf := func(id uuid.UUID) int {
		var p int
		if err := e.db.Raw(`SELECT mod(abs(hashtext('Account:' || ?)::bigint), 2)`, id.String()).Scan(&p).Error; err != nil {
			t.Fatal(err)
		}
		return p
	}
	accountOf := func(who string) *Account {
		for {
			a := &Account{ID: uuid.New()}
			if owner[partOf(a.ID)] == who {
				return a
			}
		}
	}
	save := func(a *Account, seq int) uuid.UUID {
		a.Record(Deposited{AccountID: a.ID, Seq: seq})
		id := a.Records()[len(a.Records())-1].ID
		if err := e.db.Save(a).Error; err != nil {
			t.Fatal(err)
		}
		return id
	}
	// a's broker goes down: two batches fail on first attempts (its outage).
	pubs["a"].down.Store(true)
	a1 := save(accountOf("a"), 0)
	time.Sleep(300 * time.Millisecond)
	// b's event v is refused once: it waits 4 s; w, behind it, waits for it.
	x := accountOf("b")
	x.Record(Deposited{AccountID: x.ID, Seq: 0})
	v := x.Records()[0].ID
	pubs["b"].refuseOnce(v.String())
	if err := e.db.Save(x).Error; err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	a2 := save(accountOf("a"), 0)
	time.Sleep(300 * time.Millisecond)
	w := save(x, 1)
	time.Sleep(300 * time.Millisecond)
	// The partitions were computed as the relay does: a's events waited.
	if got.Count(a1.String())+got.Count(a2.String()) > 0 {
		t.Fatal("an event of a's partition was published while a's broker was down")
	}
	// a's broker is back: a recovers its own partition's retries.
	pubs["a"].down.Store(false)
	a3 := save(accountOf("a"), 0)
	eventually(t, 3*time.Second, "a's events after its outage", func() bool {
		return got.Count(a1.String()) > 0 && got.Count(a2.String()) > 0 && got.Count(a3.String()) > 0
	})
	// v still waits out its own backoff: a's recovery left b's partition alone.
	var availableIn float64
	if err := e.db.Raw(`SELECT extract(epoch FROM available_at - now()) FROM outbox_messages WHERE id = ?`, v).Scan(&availableIn).Error; err != nil {
		t.Fatal(err)
	}
	if availableIn <= 0 {
		t.Fatalf("v was made due by the other instance's outage recovery (due %.2fs ago)", -availableIn)
	}
	eventually(t, 15*time.Second, "v and w", func() bool { return got.Count(v.String()) > 0 && got.Count(w.String()) > 0 })
	pubs["b"].mu.Lock()
	refused := pubs["b"].once == ""
	pubs["b"].mu.Unlock()
	if !refused {
		t.Fatal("v was not refused by b's publisher: b does not own its partition")
	}
	checkOrder(t, map[uuid.UUID][]uuid.UUID{x.ID: {v, w}}, got)
}
