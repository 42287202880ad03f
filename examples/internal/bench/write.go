package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/migrations"
	"github.com/heraldgo/herald/outboxhook"
)

func medianF(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func pcts(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f%%", 100*x)
	}
	return strings.Join(parts, " ")
}

type benchOrder struct {
	ID     uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	Status string
	Amount int
	aggregate.Root
}

func (benchOrder) TableName() string { return "orders" }

// benchLine is a child entity that reports its order's identity
// (aggregate.Identified): its writers take the aggregate's lock first.
type benchLine struct {
	ID      uuid.UUID `gorm:"type:varchar(36);primaryKey"`
	OrderID uuid.UUID `gorm:"type:varchar(36)"`
	aggregate.Root
}

func (benchLine) TableName() string { return "lines" }

func (l *benchLine) AggregateType() string { return "Order" }
func (l *benchLine) AggregateID() string   { return l.OrderID.String() }

type orderPlaced struct {
	OrderID uuid.UUID `json:"order_id"`
	Amount  int       `json:"amount"`
}

func (orderPlaced) EventType() string { return "order.placed" }

// runWrite measures saving an aggregate with one event: GORM without the plugin
// vs with it, and the same pair in raw SQL (business INSERT alone vs business
// INSERT + outbox INSERT in one transaction), n concurrent writers each.
func runWrite(fs *flag.FlagSet, args []string) error {
	writers := fs.Int("writers", 8, "concurrent writers")
	dur := fs.Duration("duration", 5*time.Second, "duration of one round of one scenario")
	rounds := fs.Int("rounds", 3, "rounds; scenarios alternate within a round, the median round is reported")
	only := fs.String("only", "", "run only the scenarios whose name contains this")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the measured rounds to this file")
	dbName := fs.String("db", "postgres", "database: postgres, sqlite or mysql")
	scheduled := fs.Int("scheduled", 0, "also save with Herald into an outbox holding this many events scheduled an hour ahead (written before the rounds), and print its rate / the plain Herald save's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	bdb, err := pickDB(*dbName)
	if err != nil {
		return err
	}

	type scenario struct {
		name string
		op   func(ctx context.Context) error
	}
	var scenarios []scenario
	var cleanups []func()
	defer func() {
		for _, c := range cleanups {
			c()
		}
	}()
	open := func(plugin bool) (*gorm.DB, error) {
		dsn, drop, err := bdb.scratch()
		if err != nil {
			return nil, err
		}
		cleanups = append(cleanups, drop)
		db, err := bdb.open(dsn)
		if err != nil {
			return nil, err
		}
		sqlDB, _ := db.DB()
		sqlDB.SetMaxOpenConns(*writers)
		sqlDB.SetMaxIdleConns(*writers)
		cleanups = append(cleanups, func() { _ = sqlDB.Close() })
		if plugin {
			if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
				return nil, err
			}
		} else {
			if _, err := migrations.Migrate(ctx, db); err != nil {
				return nil, err
			}
		}
		return db, db.AutoMigrate(&benchOrder{}, &benchLine{})
	}

	gormPlain, err := open(false)
	if err != nil {
		return err
	}
	gormHerald, err := open(true)
	if err != nil {
		return err
	}
	rawPlain, err := open(false)
	if err != nil {
		return err
	}
	rawOutbox, err := open(false)
	if err != nil {
		return err
	}
	var gormHeraldSched *gorm.DB
	if *scheduled > 0 {
		if gormHeraldSched, err = open(true); err != nil {
			return err
		}
		t0 := time.Now()
		if err := loadScheduled(gormHeraldSched, *scheduled, time.Hour); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%d events scheduled ahead written in %.1f s\n", *scheduled, time.Since(t0).Seconds())
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tp.Tracer("bench")
	rawPlainDB, _ := rawPlain.DB()
	rawOutboxDB, _ := rawOutbox.DB()

	scenarios = []scenario{
		{"GORM Create, no plugin", func(ctx context.Context) error {
			o := &benchOrder{ID: uuid.New(), Status: "placed", Amount: 1500}
			o.Record(orderPlaced{OrderID: o.ID, Amount: 1500}) // recorded, never written
			return gormPlain.WithContext(ctx).Create(o).Error
		}},
		{"GORM Create + Herald (1 event)", func(ctx context.Context) error {
			o := &benchOrder{ID: uuid.New(), Status: "placed", Amount: 1500}
			o.Record(orderPlaced{OrderID: o.ID, Amount: 1500})
			return gormHerald.WithContext(ctx).Create(o).Error
		}},
		{"raw SQL: INSERT", func(ctx context.Context) error {
			tx, err := rawPlainDB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, bdb.rawInsert, uuid.NewString(), "placed", 1500); err != nil {
				return err
			}
			return tx.Commit()
		}},
		{"raw SQL: INSERT + outbox INSERT", func(ctx context.Context) error {
			id := uuid.New()
			payload, err := json.Marshal(orderPlaced{OrderID: id, Amount: 1500})
			if err != nil {
				return err
			}
			tx, err := rawOutboxDB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, bdb.rawInsert, id.String(), "placed", 1500); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, bdb.rawOutboxInsert, bdb.rawOutboxArgs(id.String(), payload)...); err != nil {
				return err
			}
			return tx.Commit()
		}},
		// After the four the ratios are computed from: what serializing the writers
		// of one aggregate costs when its events do not come from its own row.
		{"GORM Create + Herald, Identified (aggregate lock)", func(ctx context.Context) error {
			l := &benchLine{ID: uuid.New(), OrderID: uuid.New()}
			l.Record(orderPlaced{OrderID: l.OrderID, Amount: 1500})
			return gormHerald.WithContext(ctx).Create(l).Error
		}},
		// Tracing on: a sampled request span in the context (the SDK, with no
		// exporter), whose trace context the hook stores with the event. Every
		// other scenario runs with tracing off (no span in the context).
		{"GORM Create + Herald, traced request (SDK span)", func(ctx context.Context) error {
			ctx, span := tracer.Start(ctx, "request")
			defer span.End()
			o := &benchOrder{ID: uuid.New(), Status: "placed", Amount: 1500}
			o.Record(orderPlaced{OrderID: o.ID, Amount: 1500})
			return gormHerald.WithContext(ctx).Create(o).Error
		}},
	}

	// With -scheduled: the Herald save beside events scheduled for later
	// (issue 33: they must not slow the write path).
	schedIdx := -1
	if gormHeraldSched != nil {
		schedIdx = len(scenarios)
		scenarios = append(scenarios, scenario{fmt.Sprintf("GORM Create + Herald, %d scheduled ahead", *scheduled), func(ctx context.Context) error {
			o := &benchOrder{ID: uuid.New(), Status: "placed", Amount: 1500}
			o.Record(orderPlaced{OrderID: o.ID, Amount: 1500})
			return gormHeraldSched.WithContext(ctx).Create(o).Error
		}})
	}
	if *only != "" {
		scenarios = slices.DeleteFunc(scenarios, func(s scenario) bool { return !strings.Contains(s.name, *only) })
	}
	// Warm up every scenario (connections, prepared statements).
	for _, s := range scenarios {
		if _, err := load(ctx, *writers, 500*time.Millisecond, s.op); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	stopProfile, err := startProfile(*cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	// Scenarios alternate within each round, in a new random order each time, so
	// that drift (table growth, checkpoints, autovacuum) hits all of them alike.
	res := make([][]result, len(scenarios))
	for round := range *rounds {
		for _, i := range rand.Perm(len(scenarios)) {
			s := scenarios[i]
			r, err := load(ctx, *writers, *dur, s.op)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			fmt.Fprintf(os.Stderr, "round %d %-34s %8.0f/s p50 %s p99 %s\n", round+1, s.name, r.perSec(), ms(r.p50), ms(r.p99))
			res[i] = append(res[i], r)
		}
	}
	m := make([]result, len(res))
	for i := range res {
		m[i] = median(res[i])
	}
	fmt.Printf("Write path on %s, %d writers, %d rounds of %s per scenario (median round)\n\n", bdb.name, *writers, *rounds, *dur)
	fmt.Println("| scenario | saves/s | p50 | p99 |")
	fmt.Println("|---|---:|---:|---:|")
	for i, s := range scenarios {
		fmt.Printf("| %s | %.0f | %s | %s |\n", s.name, m[i].perSec(), ms(m[i].p50), ms(m[i].p99))
	}
	if *only != "" {
		return nil
	}
	// The ratios are taken round by round (the scenarios of one round ran side by
	// side), and their median reported.
	var gormRatios, rawRatios, rel []float64
	for r := range *rounds {
		g := res[1][r].perSec() / res[0][r].perSec()
		w := res[3][r].perSec() / res[2][r].perSec()
		gormRatios, rawRatios, rel = append(gormRatios, g), append(rawRatios, w), append(rel, g/w)
	}
	fmt.Printf("\nthroughput ratio with/without outbox (median of per-round ratios): GORM+Herald %.3f, raw SQL %.3f;\n",
		medianF(gormRatios), medianF(rawRatios))
	fmt.Printf("Herald's ratio relative to the raw ratio: median %.1f%% (rounds: %s; goal: >= 90%%)\n", 100*medianF(rel), pcts(rel))
	if schedIdx >= 0 {
		var sr []float64
		for r := range *rounds {
			sr = append(sr, res[schedIdx][r].perSec()/res[1][r].perSec())
		}
		fmt.Printf("Herald's save with %d scheduled ahead / with none: median %.1f%% (rounds: %s; goal: >= 90%%)\n", *scheduled, 100*medianF(sr), pcts(sr))
	}
	return nil
}
