package aggregate_test

import (
	"fmt"

	"github.com/heraldgo/herald/aggregate"
)

type Cart struct {
	ID    int64 `gorm:"primaryKey"`
	Items int
	aggregate.Root
}

type ItemAdded struct{ CartID int64 }

func (ItemAdded) EventType() string { return "cart.item_added" }

func (c *Cart) Add() {
	c.Items++
	c.Record(ItemAdded{CartID: c.ID})
}

// Domain methods record events; the outbox hook writes them when the cart is
// saved. Until then they can be inspected, as a unit test of the domain would.
func ExampleRoot() {
	c := &Cart{ID: 7}
	c.Add()
	c.Add()
	for _, e := range c.Events() {
		fmt.Println(e.EventType(), e.(ItemAdded).CartID)
	}
	// Output:
	// cart.item_added 7
	// cart.item_added 7
}
