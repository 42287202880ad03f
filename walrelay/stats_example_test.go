package walrelay_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/heraldgo/herald/walrelay"
)

// What a slot holds back, from any process with an ordinary connection to
// the relay's database; walrelay.ObserveSlot(db, "herald", meterProvider)
// makes gauges of the same figures.
func ExampleReadSlot() {
	db, err := sql.Open("pgx", "postgres://app@localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	s, err := walrelay.ReadSlot(context.Background(), db, walrelay.DefaultSlot)
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Problem(); err != nil {
		log.Fatal(err) // walrelay.ErrSlotMissing, or walrelay.ErrSlot: invalidated
	}
	age, streamed := s.Age()
	log.Printf("lag %d bytes, retained %d, streamed %v (last report %v ago)", s.LagBytes, s.RetainedBytes, streamed, age)
}
