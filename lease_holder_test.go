package pigeon_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// anyoneReceivesTasks lets every principal receive and ack tasks.run of
// evictFixture: whoever a principal is named, the subject lets it in.
func anyoneReceivesTasks(o *pigeon.Options) {
	for i := range o.Catalog.Subjects {
		s := &o.Catalog.Subjects[i]
		if s.Name != "tasks.run" {
			continue
		}
		anyone := []pigeon.RuleSpec{{Effect: "allow", Principals: []string{"*"}}}
		s.Policy[pigeon.OpReceive], s.Policy[pigeon.OpAck] = anyone, anyone
	}
}

// A pull consumer whose principal id happens to spell a push
// subscription's id ("sub_7" is a valid account id) may not settle the
// messages leased to that subscription, which it was never given: its ack
// or nack is ACK_NOT_ALLOWED, and the subscription's own outcome stands
// (a failed handler's message comes back; an ack is recorded).
func TestPullConsumerCannotSettleAPushSubscriptionsLease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		settle func(e *pigeon.Engine, c pigeon.Caller, id string) error
	}{
		{"ack", func(e *pigeon.Engine, c pigeon.Caller, id string) error { return e.Ack(ctx, c, "tasks.run", id) }},
		{"nack", func(e *pigeon.Engine, c pigeon.Caller, id string) error {
			return e.Nack(ctx, c, "tasks.run", id, time.Hour)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := evictFixture(t, anyoneReceivesTasks)
			boss, alice := f.connect("boss-token", "tasks.run"), f.connect("alice-token", "tasks.run")

			got := make(chan string, 4)
			release := make(chan error)
			sub, err := alice.Subscribe(ctx, "tasks.run", func(hctx context.Context, d *pigeon.Delivery) error {
				got <- d.Message.ID
				select {
				case err := <-release:
					return err
				case <-hctx.Done():
					return hctx.Err()
				}
			})
			require.NoError(t, err)
			defer sub.Unsubscribe(ctx)
			id := publishTasks(t, boss, 1, 1)[0]
			select {
			case first := <-got:
				require.Equal(t, id, first)
			case <-time.After(10 * time.Second):
				t.Fatal("the task was never delivered")
			}

			p := &pigeon.Principal{ID: sub.ID()}
			k, err := f.e.Negotiate(ctx, p, "", []string{"tasks.run"}, 0)
			require.NoError(t, err)
			requireCode(t, tc.settle(f.e, pigeon.Caller{Principal: p, ContractID: k.ID()}, id), pigeon.CodeAckNotAllowed)

			// The handler fails: the task is due again, once its retry
			// delay has passed, and comes back.
			release <- errors.New("handler failed")
			deadline := time.After(10 * time.Second)
		wait:
			for {
				f.clock.Advance(time.Second)
				select {
				case again := <-got:
					require.Equal(t, id, again, "the failed task is delivered again")
					break wait
				case <-deadline:
					t.Fatal("the failed task never came back: someone else settled it")
				case <-time.After(20 * time.Millisecond):
				}
			}
			release <- nil
		})
	}
}

// A principal id that is not text (invalid UTF-8, a control character)
// from an application's own authenticator is refused UNAUTHENTICATED: a
// push subscription's lease holder is such an id ("\xffsub_7"), and ids
// are compared as text everywhere else.
func TestAuthenticatedPrincipalIDIsText(t *testing.T) {
	for _, id := range []string{"\xffsub_1", "a\x00b", "line\nbreak", "ok\u0085"} {
		f := newFixture(t, func(o *pigeon.Options) {
			o.Authenticator = pigeon.NewStaticTokens(pigeon.StaticToken{Token: "t", Principal: id})
		})
		_, err := f.e.Authenticate(ctx, "t")
		requireCode(t, err, pigeon.CodeUnauthenticated)
	}
}
