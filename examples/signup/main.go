// Command signup shows Herald's explicit style: no aggregate, events added with
// outboxhook.Add in a plain GORM transaction, next to the rows they describe.
//
//	go run ./examples/signup
//
// With nothing set it needs no server: an SQLite file in a temporary directory,
// removed at the end, and Watermill's GoChannel. DATABASE_URL switches the
// database, as for examples/orders: postgres://user@host:port/db in a schema of
// its own, herald_signup, or mysql://user:password@host:port/db in a database
// of its own, herald_signup, DROPPED and recreated on each run (it says so).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/examples/internal/exampledb"
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
	if err := run(context.Background(), os.Getenv("DATABASE_URL"), "herald_signup"); err != nil {
		fmt.Fprintln(os.Stderr, "signup:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dbURL, schema string) error {
	if dbURL != "" {
		fmt.Printf("DROPPING the schema (PostgreSQL) or database (MySQL) %s, if there, and creating it afresh: it is this example's own\n", schema)
	}
	db, where, closeDB, err := exampledb.Open(ctx, dbURL, schema)
	if err != nil {
		return err
	}
	defer closeDB()
	fmt.Println("database:", where)
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
