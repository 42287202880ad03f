package relay

import (
	"reflect"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
)

// unsafePublisher returns why pub, a Watermill adapter's publisher Herald
// knows, is set up so that a Publish call can return before the broker
// stored the message (the relay would mark as published an event the broker
// may lose), or "" when pub is none of those or is set up safely. It reads
// the adapter's configuration by reflection, so that the library imports no
// broker client; a publisher wrapped in another type is not seen.
//
// Checked: watermill-amqp without Publish.ConfirmDelivery (its presets
// leave it off), watermill-nats on core NATS (JetStream.Disabled). Not
// checked: watermill-kafka's Sarama settings (acks, idempotence).
func unsafePublisher(pub message.Publisher) string {
	v := reflect.ValueOf(pub)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || v.Type().Name() != "Publisher" {
		return ""
	}
	switch path := v.Type().PkgPath(); {
	case strings.HasPrefix(path, "github.com/ThreeDotsLabs/watermill-amqp/"):
		if f := fieldPath(v, "config", "Publish", "ConfirmDelivery"); f.IsValid() && f.Kind() == reflect.Bool && !f.Bool() {
			return "watermill-amqp publisher without Publish.ConfirmDelivery: Publish returns before RabbitMQ has stored the message; " +
				"set ConfirmDelivery (or use Herald's publishers/amqp)"
		}
	case strings.HasPrefix(path, "github.com/ThreeDotsLabs/watermill-nats/"):
		if f := fieldPath(v, "config", "JetStream", "Disabled"); f.IsValid() && f.Kind() == reflect.Bool && f.Bool() {
			return "watermill-nats publisher on core NATS (JetStream.Disabled): core NATS stores and acknowledges nothing; use JetStream"
		}
	}
	return ""
}

// fieldPath follows the struct fields names from v (exported or not: only
// read), or returns the zero Value where one is missing.
func fieldPath(v reflect.Value, names ...string) reflect.Value {
	for _, n := range names {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return reflect.Value{}
		}
		if v = v.FieldByName(n); !v.IsValid() {
			return v
		}
	}
	return v
}
