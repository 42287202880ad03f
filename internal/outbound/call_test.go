package outbound

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/heraldgo/herald/publish"
)

var errNope = errors.New("nope")

type pubFunc func(topic string, msgs ...*message.Message) error

func (f pubFunc) Publish(topic string, msgs ...*message.Message) error { return f(topic, msgs...) }
func (pubFunc) Close() error                                           { return nil }

type batchFunc struct {
	pubFunc
	batch func(ctx context.Context, msgs []*message.Message) []error
}

func (b batchFunc) PublishBatch(ctx context.Context, _ string, msgs ...*message.Message) []error {
	return b.batch(ctx, msgs)
}

func msgs(n int) []*message.Message {
	out := make([]*message.Message, n)
	for i := range out {
		out[i] = message.NewMessage(fmt.Sprint(i), nil)
	}
	return out
}

func call(pub message.Publisher, ctx context.Context, n int) Result {
	return NewCaller(pub, 50*time.Millisecond, noop.NewTracerProvider().Tracer(""), "test").Call(ctx, "t", msgs(n))
}

func TestCall(t *testing.T) {
	bg := context.Background()
	block := make(chan struct{})
	defer close(block)
	for _, c := range []struct {
		name string
		pub  message.Publisher
		ctx  context.Context
		want []error // errors.Is targets; nil: success
	}{
		{"Publish acks", pubFunc(func(string, ...*message.Message) error { return nil }), bg, []error{nil, nil}},
		{"Publish fails every message", pubFunc(func(string, ...*message.Message) error { return errNope }), bg, []error{errNope, errNope}},
		{"panic", pubFunc(func(string, ...*message.Message) error { panic("boom") }), bg, []error{publish.ErrPublisherPanic, publish.ErrPublisherPanic}},
		{"past the timeout", pubFunc(func(string, ...*message.Message) error { <-block; return nil }), bg, []error{publish.ErrPublishTimeout, publish.ErrPublishTimeout}},
		{"PublishBatch per message", batchFunc{batch: func(_ context.Context, m []*message.Message) []error {
			return []error{nil, fmt.Errorf("%w: too big", publish.ErrRejected)}
		}}, bg, []error{nil, publish.ErrRejected}},
		{"PublishBatch of the wrong length", batchFunc{batch: func(context.Context, []*message.Message) []error { return []error{nil} }}, bg, []error{errAny, errAny}},
		{"PublishBatch's context ends at the timeout", batchFunc{batch: func(ctx context.Context, m []*message.Message) []error {
			<-ctx.Done()
			return []error{nil, nil} // too late: the call was given up on
		}}, bg, []error{publish.ErrPublishTimeout, publish.ErrPublishTimeout}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := call(c.pub, c.ctx, 2)
			if len(r.Errs) != len(c.want) || r.End.Before(r.Start) {
				t.Fatalf("result %+v", r)
			}
			for i, want := range c.want {
				switch {
				case want == nil && r.Errs[i] != nil, want != nil && r.Errs[i] == nil,
					want != nil && !errors.Is(want, errAny) && !errors.Is(r.Errs[i], want):
					t.Errorf("message %d: %v, want %v", i, r.Errs[i], want)
				}
			}
			if r.Acked() != (c.want[0] == nil) {
				t.Errorf("Acked = %v", r.Acked())
			}
		})
	}
	t.Run("ctx done", func(t *testing.T) {
		ctx, cancel := context.WithCancel(bg)
		cancel()
		r := call(pubFunc(func(string, ...*message.Message) error { <-block; return nil }), ctx, 1)
		if !errors.Is(r.Errs[0], context.Canceled) {
			t.Fatalf("error %v, want the context's", r.Errs[0])
		}
	})
}

var errAny = errors.New("any error")

func TestRefused(t *testing.T) {
	if !Refused(fmt.Errorf("natsjs: %w", publish.ErrRejected)) || Refused(errNope) || Refused(nil) {
		t.Fatal("Refused is errors.Is(err, publish.ErrRejected)")
	}
}
