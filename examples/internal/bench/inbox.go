package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
)

type benchEffect struct {
	ID        int64 `gorm:"primaryKey"`
	MessageID string
}

func (benchEffect) TableName() string { return "effects" }

// runInbox measures a handler that writes one row, called as a router calls it
// from concurrent handler goroutines, without and with the inbox, with 0% and
// 10% duplicate deliveries.
func runInbox(fs *flag.FlagSet, args []string) error {
	workers := fs.Int("workers", 8, "concurrent handler calls")
	dur := fs.Duration("duration", 4*time.Second, "duration of one round of one scenario")
	rounds := fs.Int("rounds", 3, "rounds; the median round is reported")
	if err := fs.Parse(args); err != nil {
		return err
	}
	admin, err := sql.Open("pgx", pgtest.DSN())
	if err != nil {
		return err
	}
	defer admin.Close()
	dsn, drop, err := scratchSchema(admin)
	if err != nil {
		return err
	}
	defer drop()
	db, err := pgtest.OpenPool(dsn)
	if err != nil {
		return err
	}
	defer closeGorm(db)
	if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		return err
	}
	if err := db.AutoMigrate(&benchEffect{}); err != nil {
		return err
	}
	in, err := inbox.New(db, inbox.Config{Consumer: "bench"})
	if err != nil {
		return err
	}
	plain := func(msg *message.Message) ([]*message.Message, error) {
		return nil, db.WithContext(msg.Context()).Create(&benchEffect{MessageID: msg.UUID}).Error
	}
	withInbox := in.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		return nil, inbox.Tx(msg.Context()).Create(&benchEffect{MessageID: msg.UUID}).Error
	})
	// Message ids: every 10th delivery repeats a recent id when dupPct is 10.
	var seq atomic.Int64
	recent := make([]string, 1024)
	next := func(dupPct int64) *message.Message {
		n := seq.Add(1)
		if dupPct > 0 && n%(100/dupPct) == 0 && n > 100 {
			return message.NewMessage(recent[(n-50)%1024], nil)
		}
		id := uuid.NewString()
		recent[n%1024] = id
		return message.NewMessage(id, nil)
	}
	type scenario struct {
		name string
		op   func(ctx context.Context) error
	}
	op := func(h message.HandlerFunc, dupPct int64) func(context.Context) error {
		return func(ctx context.Context) error {
			m := next(dupPct)
			m.SetContext(ctx)
			_, err := h(m)
			return err
		}
	}
	scenarios := []scenario{
		{"handler alone, 0% duplicates", op(plain, 0)},
		{"handler + inbox, 0% duplicates", op(withInbox, 0)},
		{"handler alone, 10% duplicates (handled again)", op(plain, 10)},
		{"handler + inbox, 10% duplicates (skipped)", op(withInbox, 10)},
	}
	for _, s := range scenarios {
		if _, err := load(context.Background(), *workers, 300*time.Millisecond, s.op); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	res := make([][]result, len(scenarios))
	for range *rounds {
		for i, s := range scenarios {
			r, err := load(context.Background(), *workers, *dur, s.op)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			fmt.Fprintf(os.Stderr, "%-48s %8.0f/s p50 %s\n", s.name, r.perSec(), ms(r.p50))
			res[i] = append(res[i], r)
		}
	}
	fmt.Printf("Inbox: a handler writing one row, %d concurrent calls, median of %d rounds of %s\n\n", *workers, *rounds, *dur)
	fmt.Println("| scenario | messages/s | p50 | p99 |")
	fmt.Println("|---|---:|---:|---:|")
	for i, s := range scenarios {
		m := median(res[i])
		fmt.Printf("| %s | %.0f | %s | %s |\n", s.name, m.perSec(), ms(m.p50), ms(m.p99))
	}
	return nil
}
