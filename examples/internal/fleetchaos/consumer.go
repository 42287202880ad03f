package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/inbox"
)

// consumerStats are a consumer process's counts, written to its file
// (consumer-<slot>.json) every second and at the end.
type consumerStats struct {
	Applied    int64 // effects written (their transactions may still roll back)
	Early      int64 // deliveries before the account's previous deposit was applied: retried
	Untenanted int64 // messages without a known tenant (acknowledged, unhandled): must be 0
}

type consumerCounts struct {
	applied, early, untenanted atomic.Int64
}

func (c *consumerCounts) stats() consumerStats {
	return consumerStats{Applied: c.applied.Load(), Early: c.early.Load(), Untenanted: c.untenanted.Load()}
}

func consumerFile(dir string, slot int) string {
	return filepath.Join(dir, fmt.Sprintf("consumer-%d.json", slot))
}

// errEarly is a deposit delivered before its account's previous one was
// applied: the message is nacked, and redelivered after a short delay.
var errEarly = errors.New("fleetchaos: the account's previous deposit is not applied yet")

// runConsumer is a consumer process: a router on the run's stream whose
// handler applies each deposit in its tenant's database (the message's
// events.MetaTenant), behind that tenant's inbox, until SIGTERM.
func runConsumer(ctx context.Context) error {
	c, err := readChildConfig()
	if err != nil {
		return err
	}
	log := c.logger()
	pg, err := openServerPool(c.DSN, fmt.Sprintf("fleetchaos_consumer_%d", c.Slot), 16)
	if err != nil {
		return err
	}
	defer closeDB(pg)
	counts := &consumerCounts{}
	consumer := fmt.Sprintf("consumer-%d", c.Slot)
	handlers := map[string]message.HandlerFunc{}
	for _, t := range c.Tenants {
		db := pg
		if !t.schema() {
			if db, err = t.open(c.MySQL); err != nil {
				return err
			}
			defer closeDB(db)
			limitPool(db, t)
		}
		// The tenant's own inbox table, in its database: the effect and the
		// inbox's record of the message commit together.
		in, err := inbox.New(db, inbox.Config{Table: t.qualify("inbox_messages"), Consumer: "effects", DisableAutoCreate: true, Logger: log})
		if err != nil {
			return fmt.Errorf("consumer: tenant %s: %w", t.ID, err)
		}
		handlers[t.ID] = in.Middleware(apply(t, consumer, counts))
	}
	cfg := brokertest.NATSSubscriberConfig(c.NATS, "fleetchaos")
	cfg.SubscribersCount = 8
	cfg.NakDelay = wmnats.NewStaticDelay(50 * time.Millisecond)
	sub, err := wmnats.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddConsumerHandler("effects", c.Topic, sub, func(msg *message.Message) error {
		tenant := msg.Metadata.Get(events.MetaTenant)
		h := handlers[tenant]
		if h == nil {
			counts.untenanted.Add(1)
			fmt.Fprintf(os.Stderr, "fleetchaos: %s: message %s of unknown tenant %q\n", consumer, msg.UUID, tenant)
			return nil
		}
		_, err := h(msg)
		return err
	})
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			writeStats(c.Dir, c.Slot, counts.stats())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	err = router.Run(ctx)
	<-done
	writeStats(c.Dir, c.Slot, counts.stats())
	return err
}

func writeStats(dir string, slot int, s consumerStats) {
	b, _ := json.Marshal(s)
	tmp := consumerFile(dir, slot) + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, consumerFile(dir, slot))
	}
}

// apply is the handler of tenant t's messages, in the inbox's transaction
// (inbox.Tx): it writes the deposit's effect once the account's previous
// deposit was applied, else fails (the message comes again): the effects of
// an account are applied in the order of its deposits.
func apply(t tenantRef, consumer string, counts *consumerCounts) message.HandlerFunc {
	effects := t.qualify("effects")
	return func(msg *message.Message) ([]*message.Message, error) {
		var d Deposited
		if err := json.Unmarshal(msg.Payload, &d); err != nil {
			return nil, err
		}
		tx := inbox.Tx(msg.Context())
		var last int
		if err := tx.Raw(`SELECT coalesce(max(seq), 0) FROM `+effects+` WHERE account_id = ?`, d.AccountID.String()).Row().Scan(&last); err != nil {
			return nil, err
		}
		if last < d.Seq-1 {
			counts.early.Add(1)
			return nil, errEarly
		}
		if err := tx.Exec(`INSERT INTO `+effects+` (event_id, account_id, seq, consumer) VALUES (?, ?, ?, ?)`,
			msg.UUID, d.AccountID.String(), d.Seq, consumer).Error; err != nil {
			return nil, err
		}
		counts.applied.Add(1)
		return nil, nil
	}
}

// readConsumerStats sums the consumer processes' counts.
func readConsumerStats(dir string, n int) consumerStats {
	var sum consumerStats
	for slot := 1; slot <= n; slot++ {
		b, err := os.ReadFile(consumerFile(dir, slot))
		if err != nil {
			continue
		}
		var s consumerStats
		if json.Unmarshal(b, &s) == nil {
			sum.Applied += s.Applied
			sum.Early += s.Early
			sum.Untenanted += s.Untenanted
		}
	}
	return sum
}
