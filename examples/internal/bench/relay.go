package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/examples/internal/brokertest"
	"github.com/heraldgo/herald/relay"
)

// countingPublisher counts the messages its publisher accepted, and closes done
// when it reaches want.
type countingPublisher struct {
	message.Publisher
	n    atomic.Int64
	want int64
	done chan struct{}
	once sync.Once
}

func (c *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := c.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	if c.n.Add(int64(len(msgs))) >= c.want {
		c.once.Do(func() { close(c.done) })
	}
	return nil
}

// target builds the publisher events are relayed to: "gochannel" (with a
// subscriber that acks everything) or "nats" (JetStream on the shared server).
func target(kind, topic string) (message.Publisher, func(), error) {
	switch kind {
	case "gochannel":
		gc := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1 << 17}, watermill.NopLogger{})
		ch, err := gc.Subscribe(context.Background(), topic)
		if err != nil {
			return nil, nil, err
		}
		go func() {
			for m := range ch {
				m.Ack()
			}
		}()
		return gc, func() { _ = gc.Close() }, nil
	case "nats":
		pub, err := wmnats.NewPublisher(brokertest.NATSPublisherConfig(brokertest.NATSURL()), watermill.NopLogger{})
		if err != nil {
			return nil, nil, err
		}
		return pub, func() { _ = pub.Close(); brokertest.DeleteStreams(brokertest.NATSURL(), topic) }, nil
	}
	return nil, nil, fmt.Errorf("unknown publisher %q", kind)
}

// runRelay measures the burn-down of n pending events by Herald's relay in both
// modes, against the physical reference (a claim+delete SQL loop that publishes
// nothing) and Watermill's forwarder (watermill-sql v4 + components/forwarder),
// in its default and its fastest configuration, to the same publisher.
func runRelay(fs *flag.FlagSet, args []string) error {
	n := fs.Int("events", 100000, "pending events to burn down")
	dbName := fs.String("db", "postgres", "database: postgres, sqlite or mysql")
	pubs := fs.String("publishers", "gochannel,nats", "publishers: gochannel, nats")
	only := fs.String("only", "", "run only the scenarios whose name contains this")
	batch := fs.Int("batch", 0, "relay BatchSize (0: the default)")
	conc := fs.Int("concurrency", 0, "relay PublishConcurrency (0: the default)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	stopProfile, err := startProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	bdb, err := pickDB(*dbName)
	if err != nil {
		return err
	}
	// Each scenario runs in a fresh schema (database, file); outboxed scenarios find the n events
	// already in the outbox, loaded through db.
	type scenario struct {
		name     string
		outboxed bool
		run      func(db *gorm.DB, dsn string, pub message.Publisher, done <-chan struct{}) error
	}
	herald := func(ordered bool) func(*gorm.DB, string, message.Publisher, <-chan struct{}) error {
		return func(db *gorm.DB, _ string, pub message.Publisher, done <-chan struct{}) error {
			r, err := relay.New(db, pub, relay.Config{Ordered: ordered, BatchSize: *batch, PublishConcurrency: *conc, Logger: discardLogger()})
			if err != nil {
				return err
			}
			return runUntil(r.Run, done)
		}
	}
	scenarios := []scenario{
		{"SQL reference (claim+delete+read, no publish)", true, func(db *gorm.DB, _ string, _ message.Publisher, _ <-chan struct{}) error {
			sqlDB, _ := db.DB()
			start := time.Now()
			for deleted := 0; deleted < *n; {
				k, err := bdb.claimDelete(sqlDB)
				if err != nil {
					return err
				}
				if k == 0 {
					return errors.New("the reference found nothing to claim")
				}
				deleted += k
			}
			referenceTook = time.Since(start)
			return nil
		}},
		{"Herald relay, unordered", true, herald(false)},
		{"Herald relay, ordered (1 relay)", true, herald(true)},
	}
	if bdb.forwarder != nil {
		scenarios = append(scenarios,
			scenario{"Watermill forwarder, default config", false, forwarderScenario(bdb, *n, false)},
			scenario{"Watermill forwarder, fastest (queue schema, DeleteOnAck, batch 1000)", false, forwarderScenario(bdb, *n, true)})
	}
	fmt.Printf("Burn-down of %d pending events on %s, events/s (one run each)\n\n", *n, bdb.name)
	for _, pk := range strings.Split(*pubs, ",") {
		fmt.Printf("publisher: %s\n\n| scenario | events/s | time |\n|---|---:|---:|\n", pk)
		results := map[string]float64{}
		for _, s := range scenarios {
			if *only != "" && !strings.Contains(s.name, *only) {
				continue
			}
			dsn, drop, err := bdb.scratch()
			if err != nil {
				return err
			}
			topic := brokertest.Topic("bench")
			pub, closePub, err := target(pk, topic)
			if err != nil {
				drop()
				return err
			}
			cp := &countingPublisher{Publisher: pub, want: int64(*n), done: make(chan struct{})}
			benchTopic = topic
			referenceTook = 0
			db, err := bdb.open(dsn)
			if err == nil && s.outboxed {
				err = loadOutbox(db, *n, topic)
			}
			if err == nil {
				err = s.run(db, dsn, cp, cp.done)
			}
			took := publishTook
			if referenceTook > 0 {
				took = referenceTook
			}
			if db != nil {
				closeGorm(db)
			}
			closePub()
			drop()
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			rate := float64(*n) / took.Seconds()
			results[s.name] = rate
			fmt.Printf("| %s | %.0f | %.2f s |\n", s.name, rate, took.Seconds())
			fmt.Fprintf(os.Stderr, "%s / %s: %.0f events/s\n", pk, s.name, rate)
		}
		ref, un, ord := results[scenarios[0].name], results[scenarios[1].name], results[scenarios[2].name]
		var fast float64
		if len(scenarios) > 4 {
			fast = results[scenarios[4].name]
		}
		switch {
		case ref > 0 && un > 0 && fast > 0 && ord > 0:
			fmt.Printf("\nunordered: %.0f%% of the SQL reference (goal >= 75%%), %.2fx the forwarder's fastest (goal >= 1.5x); ordered: %.0f%% of unordered\n\n",
				100*un/ref, un/fast, 100*ord/un)
		case ref > 0 && un > 0 && ord > 0:
			fmt.Printf("\nunordered: %.0f%% of the SQL reference; ordered: %.0f%% of unordered\n\n", 100*un/ref, 100*ord/un)
		default:
			fmt.Println()
		}
	}
	return nil
}

var (
	benchTopic    string
	referenceTook time.Duration
	publishTook   time.Duration
)

// runUntil runs run until done is closed (all events published), records the
// time that took, and stops it.
func runUntil(run func(context.Context) error, done <-chan struct{}) error {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- run(ctx) }()
	select {
	case <-done:
		publishTook = time.Since(start)
	case err := <-errc:
		cancel()
		if err == nil {
			err = errors.New("stopped before publishing everything")
		}
		return err
	case <-time.After(10 * time.Minute):
		cancel()
		return errors.New("not done in 10 minutes")
	}
	cancel()
	return <-errc
}

func forwarderScenario(bdb benchDB, n int, fastest bool) func(*gorm.DB, string, message.Publisher, <-chan struct{}) error {
	return func(_ *gorm.DB, dsn string, pub message.Publisher, done <-chan struct{}) error {
		schema, offsets, driver := bdb.forwarder(fastest)
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		sqlPub, err := wmsql.NewPublisher(wmsql.BeginnerFromStdSQL(db), wmsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		// Load: the forwarder's publisher wraps each message in an envelope and
		// stores it in the SQL table, as a service would inside its transaction.
		fwdPub := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: "forwarder"})
		for i := 0; i < n; i += 1000 {
			msgs := make([]*message.Message, 0, 1000)
			for j := i; j < min(i+1000, n); j++ {
				msgs = append(msgs, message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, j, strings.Repeat("x", 100)))))
			}
			if err := fwdPub.Publish(benchTopic, msgs...); err != nil {
				return err
			}
		}
		sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db), wmsql.SubscriberConfig{
			SchemaAdapter: schema, OffsetsAdapter: offsets, InitializeSchema: true,
		}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		fwd, err := forwarder.NewForwarder(sub, pub, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: "forwarder"})
		if err != nil {
			return err
		}
		return runUntil(func(ctx context.Context) error {
			err := fwd.Run(ctx)
			_ = fwd.Close()
			return err
		}, done)
	}
}

func closeGorm(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		_ = s.Close()
	}
}
