package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/twmb/franz-go/pkg/kfake"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/brokertest"
	heraldamqp "github.com/heraldgo/herald/publishers/amqp"
	heraldkafka "github.com/heraldgo/herald/publishers/kafka"
	"github.com/heraldgo/herald/publishers/natsjs"
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
// subscriber that acks everything; its buffer holds 131,072 messages, so a
// smaller backlog is published without waiting for the subscriber and a
// bigger one at the subscriber's pace), "discard" (accepts every message at
// once and keeps none: the relay's own cost, whatever the size) or "nats"
// (Watermill's JetStream publisher on the shared server), "natsjs" (Herald's,
// publishers/natsjs), "amqp" (watermill-amqp's durable pub/sub with
// ConfirmDelivery), "amqp-herald" (publishers/amqp), "kafka" (publishers/kafka
// on franz-go's in-process kfake: no Kafka broker here) or "kafka-watermill"
// (watermill-kafka's Sarama sync publisher, acks=all and idempotent, on kfake).
func target(kind, topic string) (message.Publisher, func(), error) {
	switch kind {
	case "discard":
		return discardPublisher{}, func() {}, nil
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
	case "natsjs":
		pub, err := natsjs.New(natsjs.Config{URL: brokertest.NATSURL(), AutoProvision: true, Logger: discardLogger()})
		if err != nil {
			return nil, nil, err
		}
		return pub, func() { _ = pub.Close(); brokertest.DeleteStreams(brokertest.NATSURL(), topic) }, nil
	case "amqp", "amqp-herald":
		drop, err := amqpTopology(topic)
		if err != nil {
			return nil, nil, err
		}
		var pub message.Publisher
		if kind == "amqp" {
			cfg := wmamqp.NewDurablePubSubConfig(brokertest.AMQPURL(), nil)
			cfg.Publish.ConfirmDelivery = true
			pub, err = wmamqp.NewPublisher(cfg, watermill.NopLogger{})
		} else {
			pub, err = heraldamqp.New(heraldamqp.Config{URL: brokertest.AMQPURL(), Logger: discardLogger()})
		}
		if err != nil {
			drop()
			return nil, nil, err
		}
		return pub, func() { _ = pub.Close(); drop() }, nil
	case "kafka":
		c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(4, topic))
		if err != nil {
			return nil, nil, err
		}
		pub, err := heraldkafka.New(heraldkafka.Config{Brokers: c.ListenAddrs(), Logger: discardLogger()})
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return pub, func() { _ = pub.Close(); c.Close() }, nil
	case "kafka-watermill":
		c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(4, topic))
		if err != nil {
			return nil, nil, err
		}
		// Safe for an outbox: acks=all and the idempotent producer (which
		// needs one request in flight per connection), keyed by aggregate.
		cfg := wmkafka.DefaultSaramaSyncPublisherConfig()
		cfg.Version = sarama.V2_8_0_0
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1
		pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{
			Brokers: c.ListenAddrs(), OverwriteSaramaConfig: cfg,
			Marshaler: wmkafka.NewWithPartitioningMarshaler(func(_ string, m *message.Message) (string, error) {
				return m.Metadata.Get(events.MetaAggregateID), nil
			}),
		}, watermill.NopLogger{})
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return pub, func() { _ = pub.Close(); c.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown publisher %q", kind)
}

// discardPublisher accepts every message and keeps none.
type discardPublisher struct{}

func (discardPublisher) Publish(string, ...*message.Message) error { return nil }
func (discardPublisher) Close() error                              { return nil }

// runRelay measures the burn-down of n pending events by Herald's relay in both
// modes, against the physical reference (a claim+delete SQL loop that publishes
// nothing) and Watermill's forwarder (watermill-sql v4 + components/forwarder),
// in its default and its fastest configuration, to the same publisher.
func runRelay(fs *flag.FlagSet, args []string) error {
	n := fs.Int("events", 100000, "pending events to burn down")
	sizesFlag := fs.String("sizes", "", "comma-separated backlog sizes, run one after the other (overrides -events), with a summary of each mode's rate against the first size and the SQL reference")
	rounds := fs.Int("rounds", 1, "with -sizes: run the sizes this many times; the summary gives the medians")
	dbName := fs.String("db", "postgres", "database: postgres, sqlite or mysql")
	pubs := fs.String("publishers", "gochannel,nats", "publishers: gochannel, discard, nats (Watermill's JetStream publisher), natsjs (Herald's), amqp (watermill-amqp with confirms), amqp-herald, kafka (Herald's, on kfake), kafka-watermill (watermill-kafka's sync publisher, acks=all, idempotent, on kfake)")
	only := fs.String("only", "", "run only the scenarios whose name contains this (or one of these, |-separated)")
	batch := fs.Int("batch", 0, "relay BatchSize (0: the default)")
	conc := fs.Int("concurrency", 0, "relay PublishConcurrency (0: the default)")
	workers := fs.Int("workers", 0, "relay Workers (0: the default)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	scheduled := fs.Int("scheduled", 0, "instead of the usual scenarios: Herald's relay, unordered and ordered, with none and with this many events scheduled -scheduled-ahead written before the due ones, side by side in each of -rounds rounds, to the first publisher; then the claims' plans")
	ahead := fs.Duration("scheduled-ahead", time.Hour, "with -scheduled: how far ahead the scheduled events are due")
	fs.BoolVar(&vacuumFirst, "vacuum", true, "on PostgreSQL: VACUUM (ANALYZE) the outbox after loading it, before the burn-down (else the insert-driven autovacuum of the fresh rows may run during it, in some runs and not in others); on MySQL/MariaDB, write its dirty pages out (FLUSH TABLES ... FOR EXPORT)")
	fs.BoolVar(&premigrate, "premigrate", true, "make the relay's tables and indexes before loading the outbox (with -scheduled: run Herald's migrations; else relay.Setup in the scenario's mode, the SQL reference's being unordered): they are filled by the load, not built at the relay's start inside the timed burn-down, and the SQL reference deletes from the unordered relay's indexes")
	fs.DurationVar(&settle, "settle", 0, "with -scheduled: wait this long after loading, before the burn-down (the database's background work for the load, page flushing and purge, done first)")
	explainCycleFlag := fs.Bool("explain-cycle", false, "instead of the usual scenarios (MySQL/MariaDB): the ordered relay's cycle in the middle of a burn-down of -events, each statement's ANALYZE FORMAT=JSON (MySQL: EXPLAIN ANALYZE), and the SQL reference's")
	explainFlag := fs.Bool("explain", true, "with -scheduled: print the claims' plans with the scheduled events present")
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
	if *explainCycleFlag {
		return explainCycle(bdb, *n)
	}
	if *scheduled > 0 {
		return runScheduledBurn(bdb, *n, *scheduled, *ahead, strings.Split(*pubs, ",")[0], *rounds, *only,
			relay.Config{BatchSize: *batch, PublishConcurrency: *conc, Workers: *workers}, *explainFlag)
	}
	// Each scenario runs in a fresh schema (database, file); outboxed scenarios find the n events
	// already in the outbox, loaded through db.
	herald := func(ordered bool) func(*burnRun) error {
		return func(b *burnRun) error {
			r, err := relay.New(b.db, b.pub, relay.Config{Ordered: ordered, BatchSize: *batch, PublishConcurrency: *conc, Workers: *workers, Logger: discardLogger()})
			if err != nil {
				return err
			}
			return runUntil(r.Run, b.pub.done)
		}
	}
	scenarios := []burnScenario{
		{"SQL reference (claim+delete+read, no publish)", true, reference(bdb.claimDelete)},
		{"Herald relay, unordered", true, herald(false)},
		{"Herald relay, ordered (1 relay)", true, herald(true)},
	}
	if bdb.claimDeleteRC != nil {
		// The reference at the relay's isolation (MySQL: READ COMMITTED,
		// so that no gap lock holds back the application's inserts).
		scenarios = append(scenarios, burnScenario{refRC, true, reference(bdb.claimDeleteRC)})
	}
	scenarios = append(scenarios, burnScenario{brokerRef, false,
		func(b *burnRun) error {
			// Every one of the n messages acked, or an error.
			took, err := brokerReference(benchPublisher, benchTopic, b.n)
			if err == nil {
				referenceTook, b.bypassed = took, int64(b.n)
			}
			return err
		}})
	if bdb.forwarder != nil {
		scenarios = append(scenarios,
			burnScenario{"Watermill forwarder, default config", false, forwarderScenario(bdb, false)},
			burnScenario{fastestForwarder, false, forwarderScenario(bdb, true)})
	}
	sizes := []int{*n}
	if *sizesFlag != "" {
		sizes = nil
		for _, f := range strings.Split(*sizesFlag, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || v <= 0 {
				return fmt.Errorf("bad -sizes %q", *sizesFlag)
			}
			sizes = append(sizes, v)
		}
	}
	bySize := map[int]map[string][]float64{}
	for round := range *rounds {
		if *rounds > 1 {
			fmt.Printf("Round %d of %d\n\n", round+1, *rounds)
		}
		for _, size := range sizes {
			*n = size
			results, err := burnDown(bdb, *n, *pubs, *only, scenarios)
			if err != nil {
				return err
			}
			if bySize[size] == nil {
				bySize[size] = map[string][]float64{}
			}
			for name, rate := range results {
				bySize[size][name] = append(bySize[size][name], rate)
			}
		}
	}
	if len(sizes) > 1 {
		med := func(size int, name string) float64 {
			v := slices.Clone(bySize[size][name])
			if len(v) == 0 {
				return 0
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		first, last := sizes[0], sizes[len(sizes)-1]
		fmt.Printf("Summary (%s, first publisher, median of %d round(s)): events/s by backlog size\n\n| scenario |", bdb.name, *rounds)
		for _, size := range sizes {
			fmt.Printf(" %d |", size)
		}
		fmt.Printf(" %d / %d |\n|---|", last, first)
		for range sizes {
			fmt.Printf("---:|")
		}
		fmt.Println("---:|")
		for _, sc := range scenarios[:3] {
			fmt.Printf("| %s |", sc.name)
			for _, size := range sizes {
				fmt.Printf(" %.0f |", med(size, sc.name))
			}
			if f := med(first, sc.name); f > 0 {
				fmt.Printf(" %.0f%% |\n", 100*med(last, sc.name)/f)
			} else {
				fmt.Println(" - |")
			}
		}
		fmt.Println()
		for _, size := range sizes {
			if ref := med(size, scenarios[0].name); ref > 0 {
				fmt.Printf("at %d: unordered %.0f%% of the SQL reference, ordered %.0f%%\n", size,
					100*med(size, scenarios[1].name)/ref, 100*med(size, scenarios[2].name)/ref)
			}
		}
		// The same ratios round by round (the sizes of a round ran one after
		// the other), and their median: steadier than the ratio of medians on
		// a noisy machine.
		for _, sc := range scenarios[:3] {
			var per []float64
			for i, f := range bySize[first][sc.name] {
				if i < len(bySize[last][sc.name]) && f > 0 {
					per = append(per, 100*bySize[last][sc.name][i]/f)
				}
			}
			if len(per) == 0 {
				continue
			}
			shown := make([]string, len(per))
			for i, v := range per {
				shown[i] = fmt.Sprintf("%.0f%%", v)
			}
			slices.Sort(per)
			fmt.Printf("%s, %d / %d per round: %s (median %.0f%%)\n", sc.name, last, first, strings.Join(shown, " "), per[len(per)/2])
		}
		for _, size := range sizes {
			for _, sc := range scenarios[:3] {
				fmt.Fprintf(os.Stderr, "%d %s: %.0f\n", size, sc.name, bySize[size][sc.name])
			}
		}
	}
	return nil
}

// reference is the SQL reference's scenario: claim runs until the run's n
// events are deleted (the n of the size running, not one fixed when the
// scenarios were made) or it finds nothing; referenceTook is the time that
// took.
func reference(claim func(*sql.DB) (int, error)) func(*burnRun) error {
	return func(b *burnRun) error {
		sqlDB, err := b.db.DB()
		if err != nil {
			return err
		}
		deleted, took, err := claimAll(claim, sqlDB, b.n)
		b.bypassed = deleted
		referenceTook = took
		return err
	}
}

// setupRelay makes the outbox and what a relay in that mode needs
// (relay.Setup), before a load.
func setupRelay(db *gorm.DB, ordered bool) error {
	r, err := relay.New(db, discardPublisher{}, relay.Config{Ordered: ordered, Logger: discardLogger()})
	if err != nil {
		return err
	}
	return r.Setup(context.Background())
}

// burnScenario is one burn-down scenario: outboxed ones find the events
// already in the outbox, loaded through the run's db.
type burnScenario struct {
	name     string
	outboxed bool
	run      func(*burnRun) error
}

// burnRun is what a scenario runs on: its database (dsn; the outbox loaded
// when the scenario is outboxed), the backlog's size n, and the publisher
// that counts what it accepted (its done closed at n). A scenario that
// drains events without that publisher (the SQL references delete them, the
// broker reference publishes with its own client) counts them in bypassed.
type burnRun struct {
	db       *gorm.DB
	dsn      string
	n        int
	pub      *countingPublisher
	bypassed int64
}

// drained is how many events the run drained: published through its
// publisher, or drained around it (a scenario does one or the other).
func (b *burnRun) drained() int64 { return b.pub.n.Load() + b.bypassed }

// burnDown runs the scenarios on n pending events for each publisher and
// returns the first publisher's rates by scenario.
func burnDown(bdb benchDB, n int, pubs, only string, scenarios []burnScenario) (map[string]float64, error) {
	var first map[string]float64
	fmt.Printf("Burn-down of %d pending events on %s, events/s (one run each)\n\n", n, bdb.name)
	for i, pk := range strings.Split(pubs, ",") {
		fmt.Printf("publisher: %s\n\n| scenario | events/s | time | machine CPU per event: all (relay + database + broker) |\n|---|---:|---:|---:|\n", pk)
		results, cpus := map[string]float64{}, map[string]cpuUse{}
		if i == 0 {
			first = results
		}
		for _, s := range scenarios {
			if only != "" && !slices.ContainsFunc(strings.Split(only, "|"), func(o string) bool { return strings.Contains(s.name, o) }) {
				continue
			}
			dsn, drop, err := bdb.scratch()
			if err != nil {
				return nil, err
			}
			topic := brokertest.Topic("bench")
			pub, closePub, err := target(pk, topic)
			if err != nil {
				drop()
				return nil, err
			}
			cp := &countingPublisher{Publisher: pub, want: int64(n), done: make(chan struct{})}
			benchTopic, benchPublisher = topic, pk
			referenceTook = 0
			db, err := bdb.open(dsn)
			if err == nil && s.outboxed && premigrate {
				// The relay's tables and indexes made before the load, for
				// the scenario's mode (the SQL reference: unordered's), as
				// on an outbox a relay already runs on: the relay's start
				// builds no index over the backlog inside its timed run,
				// and the SQL reference deletes from the same indexes as
				// the unordered relay's marks.
				err = setupRelay(db, strings.Contains(s.name, "ordered (1 relay)"))
			}
			if err == nil && s.outboxed {
				err = loadOutbox(db, n, topic)
			}
			if err == nil && s.outboxed {
				err = settleLoad(db)
			}
			cpu0 := machineCPU()
			run := &burnRun{db: db, dsn: dsn, n: n, pub: cp}
			if err == nil {
				err = s.run(run)
			}
			cpu := machineCPU().sub(cpu0).per(n)
			if err == nil {
				// The one check of every scenario: n events drained, the
				// outbox (where it has one) empty.
				outbox := db
				if !s.outboxed {
					outbox = nil
				}
				err = verifyDrained(n, run.drained(), outbox, 0)
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
			if errors.Is(err, errNoBrokerReference) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s, %d events, publisher %s: %w", s.name, n, pk, err)
			}
			rate := float64(n) / took.Seconds()
			results[s.name], cpus[s.name] = rate, cpu
			fmt.Printf("| %s | %.0f | %.2f s | %.1f µs (%.1f + %.1f + %.1f) |\n", s.name, rate, took.Seconds(),
				us(cpu.total()), us(cpu.self), us(cpu.db), us(cpu.broker))
			fmt.Fprintf(os.Stderr, "%s / %s: %.0f events/s\n", pk, s.name, rate)
		}
		ref, un, ord := results[scenarios[0].name], results[scenarios[1].name], results[scenarios[2].name]
		fast := results[fastestForwarder]
		if rc := results[refRC]; rc > 0 && un > 0 {
			fmt.Printf("\nunordered: %.0f%% of the SQL reference at READ COMMITTED, the relay's isolation (%.1f µs of CPU per event, against %.1f)\n",
				100*un/rc, us(cpus[refRC].total()), us(cpus[scenarios[1].name].total()))
		}
		if broker := results[brokerRef]; broker > 0 && un > 0 {
			fmt.Printf("\nunordered: %.0f%% of the broker reference", 100*un/broker)
			if ref > 0 {
				fmt.Printf(", %.0f%% of the lower of the two references (goal >= 75%%)", 100*un/min(broker, ref))
			}
			fmt.Println()
			machineBound(ref, broker, un, cpus[scenarios[0].name].total(), cpus[brokerRef].total(), cpus[scenarios[1].name].total())
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
	return first, nil
}

// machineBound prints what the machine allows a relay that does the work of
// both references: its cores divided by the CPU time both take per event
// (each measured alone, in this run), beside the relay's own figures.
func machineBound(sqlRef, brokerRef, un float64, sqlCPU, brokerCPU, unCPU time.Duration) {
	both := sqlCPU + brokerCPU
	if both <= 0 || sqlRef <= 0 || un <= 0 {
		return
	}
	cores := float64(runtime.NumCPU())
	bound := cores / both.Seconds()
	fmt.Printf("machine: the two references' CPU per event together %.1f µs (SQL %.1f, broker %.1f): %d cores allow %.0f events/s "+
		"for their work alone; Herald's unordered %.0f%% of that, at %.1f µs of CPU per event; 75%% of the lower reference needs %.1f µs or less\n",
		us(both), us(sqlCPU), us(brokerCPU), runtime.NumCPU(), bound, 100*un/bound, us(unCPU), cores/(0.75*min(sqlRef, brokerRef))*1e6)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// The scenarios the summary compares with, by name.
const (
	brokerRef        = "Broker reference (plain client, pipelined acks, no database)"
	refRC            = "SQL reference at READ COMMITTED (the relay's isolation)"
	fastestForwarder = "Watermill forwarder, fastest (queue schema, DeleteOnAck, batch 1000)"
)

var (
	benchPublisher string // the publisher kind of the scenario running
	benchTopic     string
	referenceTook  time.Duration
	publishTook    time.Duration
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

func forwarderScenario(bdb benchDB, fastest bool) func(*burnRun) error {
	return func(b *burnRun) error {
		n, dsn, pub := b.n, b.dsn, b.pub
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
		}, pub.done)
	}
}

func closeGorm(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		_ = s.Close()
	}
}
