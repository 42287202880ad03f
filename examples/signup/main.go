// Command signup shows Herald's explicit style: no aggregate, events added with
// outboxhook.Add in a plain GORM transaction, next to the rows they describe.
//
//	go run ./examples/signup
//
// It uses PostgreSQL at 127.0.0.1:5432 (DATABASE_URL overrides), in a schema of
// its own, herald_signup, recreated on each run, and Watermill's GoChannel.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// User is a plain GORM model: no aggregate.
type User struct {
	ID    uint `gorm:"primaryKey"`
	Email string
}

// UserSignedUp is the event the signup publishes.
type UserSignedUp struct {
	UserID uint   `json:"user_id"`
	Email  string `json:"email"`
}

func (UserSignedUp) EventType() string { return "user.signed_up" }

func main() {
	if err := run(context.Background(), "herald_signup"); err != nil {
		fmt.Fprintln(os.Stderr, "signup:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, schema string) error {
	db, err := open(ctx, schema)
	if err != nil {
		return err
	}
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	r, err := relay.New(db, pubSub, relay.Config{})
	if err != nil {
		return err
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{Notify: r.Wake})); err != nil {
		return err
	}
	if err := db.AutoMigrate(&User{}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	messages, err := pubSub.Subscribe(ctx, "user.signed_up")
	if err != nil {
		return err
	}

	signUp := func(email string, fail bool) error {
		return db.Transaction(func(tx *gorm.DB) error {
			u := User{Email: email}
			if err := tx.Create(&u).Error; err != nil {
				return err
			}
			// The event, in the same transaction as the user row.
			if err := outboxhook.Add(tx, UserSignedUp{UserID: u.ID, Email: u.Email}); err != nil {
				return err
			}
			if fail {
				return errors.New("welcome mail quota exceeded")
			}
			return nil
		})
	}
	if err := signUp("ada@example.com", false); err != nil {
		return err
	}
	fmt.Println("signed up ada@example.com")
	err = signUp("bob@example.com", true)
	fmt.Printf("bob@example.com rolled back (%v): no user, no event\n", err)
	if err := signUp("grace@example.com", false); err != nil {
		return err
	}
	fmt.Println("signed up grace@example.com")

	var reg events.Registry
	reg.MustRegister(UserSignedUp{})
	for range 2 {
		select {
		case msg := <-messages:
			e, env, err := inbox.Decode(&reg, msg)
			if err != nil {
				return err
			}
			msg.Ack()
			fmt.Printf("published %s: %+v (id %s)\n", env.Type, e.(UserSignedUp), env.ID)
		case <-time.After(10 * time.Second):
			return errors.New("no event published within 10s")
		}
	}
	var users int64
	db.Model(&User{}).Count(&users)
	fmt.Printf("summary: %d users, 2 events published\n", users)
	return nil
}

func open(ctx context.Context, schema string) (*gorm.DB, error) {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE; CREATE SCHEMA `+schema); err != nil {
		return nil, fmt.Errorf("cannot prepare schema %s at %s (set DATABASE_URL to use another database): %w", schema, dsn, err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return gorm.Open(postgres.Open(u.String()), &gorm.Config{Logger: logger.Discard})
}
