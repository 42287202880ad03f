package kafka_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldgo/herald/events"
	"github.com/heraldgo/herald/publishers/kafka"
)

// A Publisher on franz-go's in-process fake cluster (kfake), as in this
// package's tests; with a real cluster, Brokers are its seed brokers. Hand
// it to relay.New: the relay calls PublishBatch and retries exactly the
// messages that failed.
func Example() {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(3, "account.deposited"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	pub, err := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs()})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = pub.Close() }()

	var msgs []*message.Message
	for i := range 3 {
		m := message.NewMessage(fmt.Sprintf("0190c3a4-0000-7000-8000-00000000000%d", i), []byte(`{"Seq":1}`))
		m.Metadata.Set(events.MetaAggregateID, "account-42") // the record key
		msgs = append(msgs, m)
	}
	// r, _ := relay.New(db, pub, relay.Config{Ordered: true})
	for i, err := range pub.PublishBatch(context.Background(), "account.deposited", msgs...) {
		fmt.Println(msgs[i].UUID, err)
	}
	// Output:
	// 0190c3a4-0000-7000-8000-000000000000 <nil>
	// 0190c3a4-0000-7000-8000-000000000001 <nil>
	// 0190c3a4-0000-7000-8000-000000000002 <nil>
}
