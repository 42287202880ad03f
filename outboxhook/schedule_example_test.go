package outboxhook_test

import (
	"context"
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

// The aggregate's own method cancels the reminder it scheduled, and the save
// that writes the payment applies the cancel in its transaction: no
// transaction of the caller's, no key passed around. What the cancel did is
// known after the commit; a reminder too late to cancel does not fail the
// save, unless its context asks (RequireRescheduled).
func ExampleRequireRescheduled() {
	db := pgtest.ScratchDB() // gorm.Open(postgres.Open(dsn), &gorm.Config{})
	if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Invoice{}); err != nil {
		log.Fatal(err)
	}

	inv := &Invoice{ID: uuid.New(), Status: "issued"}
	reminder := "reminder:" + inv.ID.String()
	inv.Schedule(PaymentReminder{InvoiceID: inv.ID}, events.After(24*time.Hour).Keyed(reminder))
	if err := db.Create(inv).Error; err != nil {
		log.Fatal(err)
	}

	inv.Pay(1500)                              // in a domain method: records invoice.paid ...
	inv.CancelKey(reminder)                    // ... and the cancel of the reminder
	if err := db.Save(inv).Error; err != nil { // one transaction: the row, the event, the cancel
		log.Fatal(err)
	}
	for _, r := range inv.Rescheduled() {
		fmt.Println(r.Key == reminder, "cancelled:", r.Changed)
	}

	// Asked for, a cancel that finds nothing to cancel fails the save.
	inv.CancelKey(reminder)
	ctx := outboxhook.RequireRescheduled(context.Background())
	err := db.WithContext(ctx).Save(inv).Error
	fmt.Println(errors.Is(err, outboxhook.ErrNotScheduled))
	// Output:
	// true cancelled: 1
	// true
}
