package walrelay_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/walrelay"
)

// The write side keeps its events in the WAL; the relay, in this process or
// another, publishes them from its slot.
func Example() {
	dsn := "postgres://app@localhost:5432/app" // the server runs wal_level=logical
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Use(outboxhook.New(outboxhook.Config{Storage: outboxhook.StorageWAL})); err != nil {
		log.Fatal(err) // outboxhook.ErrWALLevel says what to set
	}

	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}) // or any Watermill publisher
	r, err := walrelay.New(dsn, pub, walrelay.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// Setup makes the slot before the first event is written (Run would too,
	// but the slot keeps only what is written after it exists).
	if err := r.Setup(ctx); err != nil {
		log.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
