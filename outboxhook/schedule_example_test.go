package outboxhook_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
)

type PaymentReminder struct{ InvoiceID uuid.UUID }

func (PaymentReminder) EventType() string { return "invoice.payment_reminder" }

// Schedule an event from an aggregate's method, then cancel it, by the key
// chosen for it, in the transaction of the change that made it pointless: the
// reminder goes in 24 hours unless the invoice is paid first.
func ExampleCancelKey() {
	db := pgtest.ScratchDB() // gorm.Open(postgres.Open(dsn), &gorm.Config{})
	if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Invoice{}); err != nil {
		log.Fatal(err)
	}

	inv := &Invoice{ID: uuid.New(), Status: "issued"}
	inv.Record(InvoiceIssued{InvoiceID: inv.ID})
	reminder := "reminder:" + inv.ID.String()
	inv.Schedule(PaymentReminder{InvoiceID: inv.ID}, events.After(24*time.Hour).Keyed(reminder))
	id := inv.Records()[1].ID                    // the reminder's event id: Cancel and Move take it too
	if err := db.Create(inv).Error; err != nil { // the invoice, the event due now and the reminder
		log.Fatal(err)
	}

	err := db.Transaction(func(tx *gorm.DB) error {
		inv.Pay(1500)
		if err := tx.Save(inv).Error; err != nil {
			return err
		}
		res, err := outboxhook.CancelKey(tx, reminder) // cancelled only if the payment commits
		fmt.Println("reminders cancelled:", res.Changed)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	// A cancel says what became of an event it cannot cancel: published,
	// due (being published), dead, or, as here, gone.
	err = outboxhook.Cancel(db, id)
	fmt.Println(errors.Is(err, outboxhook.ErrNotScheduled))
	// Output:
	// reminders cancelled: 1
	// true
}
