// Command orders is Herald's example service: orders are placed and paid through
// an aggregate that records events, and each save writes the order row and its
// events to PostgreSQL in one transaction.
//
//	go run ./examples/orders
//
// It uses PostgreSQL at 127.0.0.1:5432 (DATABASE_URL overrides) and works in a
// schema of its own, herald_example, which it recreates on each run.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/outboxhook"
)

// Order is the aggregate: a GORM model that embeds aggregate.Root.
type Order struct {
	ID       uuid.UUID `gorm:"type:uuid;primaryKey"`
	Customer string
	Total    int
	Status   string
	aggregate.Root
}

// OrderPlaced is recorded when an order is placed.
type OrderPlaced struct {
	OrderID  uuid.UUID `json:"order_id"`
	Customer string    `json:"customer"`
	Total    int       `json:"total"`
}

func (OrderPlaced) EventType() string { return "order.placed" }

// OrderPaid is recorded when an order is paid.
type OrderPaid struct {
	OrderID uuid.UUID `json:"order_id"`
	Amount  int       `json:"amount"`
}

func (OrderPaid) EventType() string { return "order.paid" }

// PlaceOrder creates an order and records that it was placed.
func PlaceOrder(customer string, total int) *Order {
	o := &Order{ID: uuid.New(), Customer: customer, Total: total, Status: "placed"}
	o.Record(OrderPlaced{OrderID: o.ID, Customer: customer, Total: total})
	return o
}

// Pay marks the order paid and records it.
func (o *Order) Pay() error {
	if o.Status != "placed" {
		return fmt.Errorf("order %s is %s, cannot pay", o.ID, o.Status)
	}
	o.Status = "paid"
	o.Record(OrderPaid{OrderID: o.ID, Amount: o.Total})
	return nil
}

const schema = "herald_example"

func main() {
	n := flag.Int("orders", 5, "orders to place")
	flag.Parse()
	if err := run(context.Background(), *n); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int) error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := connect(ctx, dsn)
	if err != nil {
		return err
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		return err
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		return err
	}

	ctx = events.WithMetadata(ctx, events.Metadata{"correlation_id": "example-run"})
	for i := range n {
		o := PlaceOrder(fmt.Sprintf("customer-%d", i+1), 1000+100*i)
		if err := db.WithContext(ctx).Create(o).Error; err != nil {
			return fmt.Errorf("place order: %w", err)
		}
		fmt.Printf("placed %s for %s (%d)\n", o.ID, o.Customer, o.Total)
		if i%2 == 0 { // every other order is paid at once
			if err := o.Pay(); err != nil {
				return err
			}
			if err := db.WithContext(ctx).Save(o).Error; err != nil {
				return fmt.Errorf("pay order: %w", err)
			}
			fmt.Printf("paid   %s\n", o.ID)
		}
	}

	// A save that fails leaves neither the row nor its events behind.
	o := PlaceOrder("rolled-back", 1)
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(o).Error; err != nil {
			return err
		}
		return errors.New("payment provider said no")
	})
	fmt.Printf("rolled back %s: %v (its %d event(s) stay on the aggregate)\n", o.ID, err, len(o.Events()))

	var rows []struct {
		Type, AggregateID, Payload string
	}
	if err := db.Raw(`SELECT type, aggregate_id, payload::text AS payload FROM outbox_messages ORDER BY seq`).Scan(&rows).Error; err != nil {
		return err
	}
	fmt.Println("\noutbox_messages (what the relay will publish):")
	for _, r := range rows {
		fmt.Printf("  %-13s %s %s\n", r.Type, r.AggregateID, r.Payload)
	}
	var orders int64
	db.Model(&Order{}).Count(&orders)
	fmt.Printf("\nsummary: %d orders, %d events written\n", orders, len(rows))
	return nil
}

// rootCause returns the short reason behind a connection error, not pgx's chain.
func rootCause(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	var sysErr *os.SyscallError
	if errors.As(err, &sysErr) {
		return sysErr.Err.Error()
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return netErr.Err.Error()
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// connect opens GORM on a fresh herald_example schema, or says in one line why
// PostgreSQL could not be reached and how to point the example elsewhere.
func connect(ctx context.Context, dsn string) (*gorm.DB, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL is not a postgres:// URL: %v", err)
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := admin.PingContext(pctx); err != nil {
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %s (set DATABASE_URL=postgres://user@host:port/db to use another)",
			u.Host, rootCause(err))
	}
	if _, err := admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE; CREATE SCHEMA `+schema); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	slog.Debug("connecting", "dsn", u.Redacted())
	return gorm.Open(postgres.Open(u.String()), &gorm.Config{Logger: logger.Discard})
}
