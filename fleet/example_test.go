package fleet_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/fleet"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// Two tenants, an SQLite file each, relayed by one fleet: each message
// carries its tenant.
func Example() {
	dir, err := os.MkdirTemp("", "fleet-example")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	openTenant := func(_ context.Context, id string) (*gorm.DB, error) {
		return testkit.OpenSQLite(testkit.SQLiteDSN(filepath.Join(dir, id+".db")), &gorm.Config{}) // Herald's SQLite DSN
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, id := range []string{"acme", "globex"} { // each tenant's writers save an account
		db, err := openTenant(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
			log.Fatal(err)
		}
		if err := db.AutoMigrate(&Account{}); err != nil {
			log.Fatal(err)
		}
		a := &Account{ID: uuid.New()}
		a.Record(Deposited{AccountID: a.ID})
		if err := db.Create(a).Error; err != nil {
			log.Fatal(err)
		}
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	}
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}) // or NATS, RabbitMQ, Kafka, ...
	messages, err := pub.Subscribe(ctx, "account.deposited")
	if err != nil {
		log.Fatal(err)
	}

	// README:fleet
	f, err := fleet.New(pub, fleet.Config{
		Tenants: func(ctx context.Context) ([]fleet.Tenant, error) {
			return []fleet.Tenant{
				{ID: "acme", Open: func(ctx context.Context) (*gorm.DB, error) { return openTenant(ctx, "acme") }},
				{ID: "globex", Open: func(ctx context.Context) (*gorm.DB, error) { return openTenant(ctx, "globex") }},
			}, nil
		},
		Relay: relay.Config{Ordered: true}, // every tenant's relay
	})
	if err != nil {
		log.Fatal(err) // a bad config fails here
	}
	go func() {
		if err := f.Run(ctx); err != nil { // until ctx is cancelled
			log.Print(err)
		}
	}()
	// README:end

	var tenants []string
	for range 2 {
		m := <-messages
		m.Ack()
		tenants = append(tenants, m.Metadata.Get(events.MetaTenant))
	}
	slices.Sort(tenants)
	fmt.Println(tenants)
	// Output: [acme globex]
}
