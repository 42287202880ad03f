package kafka_test

import (
	"crypto/rand"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

const relayTopic = "account.deposited"

// Through Herald's relay in ordered mode, with a produce request refused in
// the middle of the run (INVALID_RECORD for its batch: each record is sent
// again alone, see classify): every event arrives once, and each aggregate's
// events are in commit order.
func TestRelayOrderedEndToEnd(t *testing.T) {
	t.Parallel()
	c := newCluster(t, relayTopic)
	in := failProduce(c, 4, 5, kerr.InvalidRecord)
	recs := runOrdered(t, c, 40, relay.Config{})
	if in.records.Load() == 0 {
		t.Fatal("no produce request refused")
	}
	t.Logf("%d records; the refused produce request held %d", len(recs), in.records.Load())
}

// The same with a produce request held past the relay's PublishTimeout: the
// relay counts its events failed and publishes them again while the first
// copies are still on their way; the first copies stay in commit order.
func TestRelayOrderedProduceTimesOut(t *testing.T) {
	t.Parallel()
	c := newCluster(t, relayTopic)
	var held atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		n := 0
		for _, rt := range req.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(rp.Records); err == nil {
					n += int(b.NumRecords)
				}
			}
		}
		if n < 5 {
			return nil, nil, false
		}
		c.DropControl()
		held.Store(int64(n))
		c.SleepControl(func() { time.Sleep(time.Second) })
		return nil, nil, false // then served as usual
	})
	recs := runOrdered(t, c, 40, relay.Config{PublishTimeout: 200 * time.Millisecond})
	if held.Load() == 0 {
		t.Fatal("no produce request held")
	}
	t.Logf("%d records; the held produce request had %d", len(recs), held.Load())
}

// runOrdered commits 15 events for each of n accounts (ten before the relay
// starts, five while it runs), runs an ordered relay with cfg (quick retries)
// publishing to c until the outbox is drained, and checks the topic: every
// event there, none dead, first copies in commit order per aggregate. It
// returns the records.
func runOrdered(t *testing.T, c *kfake.Cluster, n int, cfg relay.Config) []*kgo.Record {
	t.Helper()
	pub := newPublisher(t, c, kgo.ProducerBatchMaxBytes(4096)) // many produce requests
	db := testkit.SQLite.OpenNew(t, nil)
	cfg.Ordered = true
	cfg.Logger = testkit.Quiet()
	cfg.MinBackoff, cfg.MaxBackoff, cfg.PollInterval = 20*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond
	r, err := relay.New(db, pub, cfg)
	testkit.Must(t, err)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake})))
	testkit.Must(t, db.AutoMigrate(&testkit.Account{}))

	ids := map[uuid.UUID][]uuid.UUID{}
	write := func(accounts []*testkit.Account, from, k int) {
		for _, a := range accounts {
			for i := range k {
				a.Record(testkit.Deposited{AccountID: a.ID, Seq: from + i})
			}
			for _, p := range a.Records() {
				ids[a.ID] = append(ids[a.ID], p.ID)
			}
			testkit.Must(t, db.Save(a).Error)
		}
	}
	accounts := make([]*testkit.Account, n)
	for i := range accounts {
		accounts[i] = &testkit.Account{ID: uuid.New()}
	}
	write(accounts, 0, 10) // pending before the relay starts: ten layers
	testkit.Run(t, r.Run)
	write(accounts, 10, 5) // and more while it runs
	total := 0
	for _, evs := range ids {
		total += len(evs)
	}

	testkit.Eventually(t, 30*time.Second, "outbox drained", func() bool { return testkit.Pending(t, db) == 0 })
	for _, row := range testkit.Outbox(t, db) {
		if row.Dead {
			t.Fatalf("event %s dead: %s", row.ID, row.LastError)
		}
	}
	recs := consumeDistinct(t, c, relayTopic, total, 10*time.Second)
	msgs := make([]*message.Message, len(recs))
	distinct := map[string]bool{}
	for i, rec := range recs {
		msgs[i] = message.NewMessage(uuidOf(rec), nil)
		distinct[msgs[i].UUID] = true
	}
	if len(distinct) != total {
		t.Fatalf("%d distinct events of %d", len(distinct), total)
	}
	// recs are in partition order, and an aggregate lives on one partition:
	// its records' order is the order the broker holds them in.
	if v := testkit.OrderViolations(ids, msgs); v > 0 {
		t.Fatalf("%d order violations", v)
	}
	return recs
}

// Through Herald's relay in unordered mode, an event the brokers refuse (a
// record larger than the topic's max.message.bytes: MessageTooLarge, wrapping
// relay.ErrRejected) dies after MaxAttempts strikes while the others are
// published.
func TestRelayRefusedEventDies(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	createTopic(t, c, relayTopic, 4, map[string]string{"max.message.bytes": fmt.Sprint(16 << 10)})
	pub := newPublisher(t, c)
	db := testkit.SQLite.OpenNew(t, nil)
	r, err := relay.New(db, pub, relay.Config{Logger: testkit.Quiet(), MaxAttempts: 3,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	testkit.Must(t, err)
	testkit.Must(t, db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake})))
	testkit.Must(t, db.AutoMigrate(&testkit.Account{}))
	big := &testkit.Account{ID: uuid.New()}
	big.Record(bigDeposit{AccountID: big.ID, Note: incompressible(64 << 10)})
	testkit.Must(t, db.Save(big).Error)
	for range 20 {
		a := &testkit.Account{ID: uuid.New()}
		a.Record(testkit.Deposited{AccountID: a.ID})
		testkit.Must(t, db.Save(a).Error)
	}
	testkit.Run(t, r.Run)
	testkit.Eventually(t, 30*time.Second, "outbox settled", func() bool { return testkit.Pending(t, db) == 0 })
	dead := 0
	for _, row := range testkit.Outbox(t, db) {
		if row.Dead {
			dead++
			if !strings.Contains(row.LastError, "MESSAGE_TOO_LARGE") {
				t.Errorf("dead of %q, want the brokers' MESSAGE_TOO_LARGE", row.LastError)
			}
		}
	}
	if dead != 1 {
		t.Fatalf("%d dead, want the one too large", dead)
	}
	consumeDistinct(t, c, relayTopic, 20, 10*time.Second)
}

// incompressible is n random base32 characters: franz-go compresses batches.
func incompressible(n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(rand.Text())
	}
	return b.String()[:n]
}

// bigDeposit is a deposit with a note, on the same topic.
type bigDeposit struct {
	AccountID uuid.UUID
	Note      string
}

func (bigDeposit) EventType() string { return relayTopic }

// Issue 30, item 4, through the relay in ordered mode: a topic whose
// max.message.bytes takes each record alone but not the batches franz-go
// packs them in. No event dies (each is sent again alone), and each
// aggregate's events are in commit order: a dead event would be skipped and
// its aggregate's later events published before it.
func TestRelayOrderedBatchTooLargeForTopic(t *testing.T) {
	t.Parallel()
	const limit = 700
	c := newCluster(t)
	createTopic(t, c, relayTopic, 4, map[string]string{"max.message.bytes": fmt.Sprint(limit)})
	var tooLarge atomic.Int64
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Observe: true, Count: -1, When: func(r kmsg.Request) bool {
		for _, rt := range r.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				if len(rp.Records) > limit {
					tooLarge.Add(1)
				}
			}
		}
		return true
	}})
	// One strike kills: a batch's refusal must be none.
	recs := runOrdered(t, c, 40, relay.Config{MaxAttempts: 1})
	if tooLarge.Load() == 0 {
		t.Fatal("no record batch was too large for the topic")
	}
	t.Logf("%d records; %d record batches too large for the topic", len(recs), tooLarge.Load())
}
