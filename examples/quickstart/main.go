// Command quickstart is the README's code, whole: every Go block of the README
// is a region of this file (between "README:" markers), and a test checks that
// they stay the same. It runs on an SQLite file in a temporary directory, with
// Watermill's GoChannel, and needs no server.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/outboxhook"
	"github.com/heraldgo/herald/relay"
)

// README:model
type Order struct {
	ID             string `gorm:"primaryKey"`
	Status         string
	aggregate.Root // records events; maps no column
}

type OrderPaid struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func (OrderPaid) EventType() string { return "order.paid" }

// One payment per order, however often it is sent: the inbox deduplicates by this key.
func (p OrderPaid) DedupKey() string { return "paid:" + p.OrderID }

type PaymentDue struct {
	OrderID string `json:"order_id"`
}

func (PaymentDue) EventType() string { return "order.payment_due" }

func (o *Order) Place() {
	o.Status = "placed" // the reminder is published in a day, unless cancelled before
	o.Schedule(PaymentDue{OrderID: o.ID}, events.After(24*time.Hour).Keyed("reminder:"+o.ID))
}

func (o *Order) Pay(amount int) {
	o.Status = "paid"
	o.Record(OrderPaid{OrderID: o.ID, Amount: amount}) // id: a UUIDv7, taken now
	o.CancelKey("reminder:" + o.ID)                    // in the payment's transaction
}

// README:end

type UserSignedUp struct {
	Email string `json:"email"`
}

func (UserSignedUp) EventType() string { return "user.signed_up" }

type Shipment struct {
	OrderID string `gorm:"primaryKey"`
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir, err := os.MkdirTemp("", "herald-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir) //nolint:errcheck // a temporary directory
	path := filepath.Join(dir, "app.db")

	// README:open
	// SQLite: one write lock, taken at BEGIN (_txlock=immediate), waited for
	// (busy_timeout), readers beside the writer (WAL).
	dsn := "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := gorm.Open(sqlite.New(sqlite.Config{DriverName: "sqlite", DSN: dsn}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	if err := db.AutoMigrate(&Order{}, &Shipment{}); err != nil {
		return err
	}
	// Persistent: the GoChannel keeps what is published before the
	// consumer subscribes (without it, those messages are dropped).
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	var publisher message.Publisher = pubSub
	var subscriber message.Subscriber = pubSub
	// README:end

	// README:setup
	r, err := relay.New(db, publisher, relay.Config{}) // any Watermill message.Publisher
	if err != nil {
		return err
	}
	err = db.Use(outboxhook.New(outboxhook.Config{
		Notify: r.Wake, // wake the relay after each commit (in this process)
		// One topic per event type, without dots (a NATS JetStream stream name
		// cannot contain one): "order.paid" is published to "order_paid".
		Topic: func(env *events.Envelope) string { return strings.ReplaceAll(env.Type, ".", "_") },
	}))
	if err != nil {
		return err // bad config, or the outbox table could not be created
	}
	go r.Run(ctx) //nolint:errcheck // Run returns nil when ctx is cancelled
	// README:end

	if _, err := operatorMux(db, r); err != nil {
		return err
	}
	shipped := make(chan string, 1)

	// README:consume
	var reg events.Registry
	reg.MustRegister(OrderPaid{})
	in, err := inbox.New(db, inbox.Config{RetryHorizon: relay.Config{}.RetryHorizon()})
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddMiddleware(in.Middleware) // each message's effects once, in its own transaction
	router.AddConsumerHandler("ship-order", "order_paid", subscriber, func(msg *message.Message) error {
		e, _, err := inbox.Decode(&reg, msg)
		if err != nil {
			return err
		}
		paid := e.(OrderPaid)
		tx := inbox.Tx(msg.Context()) // the transaction the inbox opened
		if err := tx.Create(&Shipment{OrderID: paid.OrderID}).Error; err != nil {
			return err
		}
		// Once the shipment is committed (not before: the handler may still fail).
		inbox.AfterCommit(msg.Context(), func() { shipped <- paid.OrderID })
		return nil
	})
	go router.Run(ctx) //nolint:errcheck // returns when ctx is cancelled
	go in.Run(ctx)     //nolint:errcheck // deletes processed ids after Retention
	// README:end

	order := Order{ID: uuid.NewString()}
	order.Place()
	if err := db.Create(&order).Error; err != nil {
		return err
	}
	// README:save
	order.Pay(1500)
	if err := db.Save(&order).Error; err != nil { // &order: a copy's events could not be marked written
		return err // the UPDATE and the outbox row commit together, or neither
	}
	// README:end
	if r := order.Rescheduled(); len(r) != 1 || r[0].Changed != 1 {
		return fmt.Errorf("the payment did not cancel the reminder: %+v", r)
	}

	// README:add
	// Events with no aggregate, in a transaction of your own:
	err = db.Transaction(func(tx *gorm.DB) error {
		return outboxhook.Add(tx, UserSignedUp{Email: "ada@example.com"})
	})
	// README:end
	if err != nil {
		return err
	}

	select {
	case id := <-shipped:
		var n int64
		if err := db.Model(&Shipment{}).Where("order_id = ?", id).Count(&n).Error; err != nil {
			return err
		}
		fmt.Println("shipped order", id == order.ID, "shipment committed", n == 1)
		if n != 1 {
			return fmt.Errorf("shipped before the shipment committed")
		}
	case <-time.After(10 * time.Second):
		return fmt.Errorf("the event was not consumed in time")
	}
	return nil
}

// operatorMux mounts the admin page under /admin/outbox/, behind the
// service's own check of who may operate it.
func operatorMux(db *gorm.DB, r *relay.Relay) (*http.ServeMux, error) {
	mux := http.NewServeMux()
	// README:admin
	h, err := admin.New(db, admin.Config{AllowWrites: true, Wake: r.Wake})
	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", requireOperator(h)))
	// README:end
	return mux, err
}

// requireOperator stands for the service's own authentication: here, HTTP
// basic auth with a password from the environment.
func requireOperator(next http.Handler) http.Handler {
	want := os.Getenv("OPERATOR_PASSWORD")
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, pw, ok := req.BasicAuth(); !ok || want == "" || subtle.ConstantTimeCompare([]byte(pw), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="outbox"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, req)
	})
}
