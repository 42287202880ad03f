package outboxhook_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/internal/logicaltest"
	"github.com/heraldgo/herald/internal/pgtest"
	"github.com/heraldgo/herald/outboxhook"
)

func TestMain(m *testing.M) { pgtest.Main(logicaltest.Wrap(m)) }

// Invoice is an aggregate: a GORM model that embeds aggregate.Root and records
// events from its methods.
type Invoice struct {
	ID     uuid.UUID `gorm:"type:uuid;primaryKey"`
	Status string
	aggregate.Root
}

type InvoiceIssued struct{ InvoiceID uuid.UUID }

func (InvoiceIssued) EventType() string { return "invoice.issued" }

type InvoicePaid struct {
	InvoiceID uuid.UUID
	Amount    int
}

func (InvoicePaid) EventType() string { return "invoice.paid" }

func (i *Invoice) Pay(amount int) {
	i.Status = "paid"
	i.Record(InvoicePaid{InvoiceID: i.ID, Amount: amount})
}

// Register the plugin once; every save of an aggregate then writes its events in
// the same transaction as its row.
func Example() {
	db := pgtest.ScratchDB() // gorm.Open(postgres.Open(dsn), &gorm.Config{})
	if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Invoice{}); err != nil {
		log.Fatal(err)
	}

	inv := &Invoice{ID: uuid.New(), Status: "issued"}
	inv.Record(InvoiceIssued{InvoiceID: inv.ID})
	if err := db.Create(inv).Error; err != nil { // INSERT invoice + INSERT event, one transaction
		log.Fatal(err)
	}
	inv.Pay(1500)
	if err := db.Save(inv).Error; err != nil { // UPDATE invoice + INSERT event
		log.Fatal(err)
	}

	var rows []struct{ Type, Topic, AggregateType string }
	db.Raw(`SELECT type, topic, aggregate_type FROM outbox_messages ORDER BY seq`).Scan(&rows)
	for _, r := range rows {
		fmt.Println(r.Type, r.Topic, r.AggregateType)
	}
	fmt.Println("pending on the aggregate:", len(inv.Events()))
	// Output:
	// invoice.issued invoice.issued Invoice
	// invoice.paid invoice.paid Invoice
	// pending on the aggregate: 0
}

type UserSignedUp struct{ Email string }

func (UserSignedUp) EventType() string { return "user.signed_up" }

// Add writes events that belong to no aggregate, in the caller's transaction.
func ExampleAdd() {
	db := pgtest.ScratchDB()
	if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		log.Fatal(err)
	}
	err := db.Transaction(func(tx *gorm.DB) error {
		// ... the transaction's own writes ...
		return outboxhook.Add(tx, UserSignedUp{Email: "ada@example.com"})
	})
	if err != nil {
		log.Fatal(err)
	}
	var payload string
	db.Raw(`SELECT payload::text FROM outbox_messages`).Scan(&payload)
	fmt.Println(payload)
	// Output: {"Email": "ada@example.com"}
}

// SQLTx hands the GORM transaction to a library that takes a *sql.Tx (River's
// riverdatabasesql, DTM's barriers, database/sql code of your own): what it
// writes commits, or rolls back, with the aggregate and its events.
func ExampleSQLTx() {
	db := pgtest.ScratchDB()
	if err := db.Use(outboxhook.New(outboxhook.Config{})); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Invoice{}); err != nil {
		log.Fatal(err)
	}
	if err := db.Exec(`CREATE TABLE jobs (kind text NOT NULL)`).Error; err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	err := db.Transaction(func(tx *gorm.DB) error {
		inv := &Invoice{ID: uuid.New(), Status: "issued"}
		inv.Record(InvoiceIssued{InvoiceID: inv.ID})
		if err := tx.Create(inv).Error; err != nil {
			return err
		}
		_, plain := tx.Statement.ConnPool.(*sql.Tx)
		fmt.Println("tx.Statement.ConnPool is a *sql.Tx:", plain) // the plugin wraps it

		sqlTx, ok := outboxhook.SQLTx(tx)
		if !ok {
			return fmt.Errorf("not in a transaction")
		}
		_, err := sqlTx.ExecContext(ctx, `INSERT INTO jobs (kind) VALUES ($1)`, "send_invoice")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	var events, jobs int64
	db.Table("outbox_messages").Count(&events)
	db.Table("jobs").Count(&jobs)
	fmt.Println("events:", events, "jobs:", jobs)
	// Output:
	// tx.Statement.ConnPool is a *sql.Tx: false
	// events: 1 jobs: 1
}
