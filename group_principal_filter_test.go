package pigeon_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
)

// Two principals subscribe in one group with a filter that reads the
// principal (each takes the tasks it owns). The group's key held the
// group, selector, filter text and scope, not who the filter is evaluated
// for, so both shared one queue position: a task one member's filter
// refused was done for the group, and the other member never saw it
// (9 of 20 lost in one run). A filter that reads `principal` now makes a
// group of its own per principal, as a selection does.
func TestGroupFilterOnThePrincipalLosesNothing(t *testing.T) {
	f := evictFixture(t)
	alice, bob := f.connect("alice-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	boss := f.connect("boss-token", "tasks.run")
	var mu sync.Mutex
	got := map[string][]int{}
	handler := func(who string) pigeon.Handler {
		return func(_ context.Context, d *pigeon.Delivery) error {
			var v struct {
				N     int
				Owner string
			}
			require.NoError(t, json.Unmarshal(d.Message.Data, &v))
			mu.Lock()
			got[who] = append(got[who], v.N)
			mu.Unlock()
			return nil
		}
	}
	filter := pigeon.WithFilter(`message.data.owner == principal.id`)
	for who, s := range map[string]pigeon.Session{transporttest.Alice: alice, transporttest.Bob: bob} {
		sub, err := s.Subscribe(ctx, "tasks.run", handler(who), pigeon.WithGroup("mine"), filter)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	}
	const n = 20
	want := map[string][]int{}
	for i := range n {
		owner := transporttest.Alice
		if i%2 == 1 {
			owner = transporttest.Bob
		}
		want[owner] = append(want[owner], i)
		_, err := boss.Publish(ctx, &pigeon.Message{Type: "task", Subject: "tasks.run", Intent: "run",
			Data: json.RawMessage(`{"n":` + strconv.Itoa(i) + `,"owner":"` + owner + `"}`)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got[transporttest.Alice])+len(got[transporttest.Bob]) >= n
	}, 10*time.Second, 5*time.Millisecond, "tasks lost: %v", func() map[string][]int { mu.Lock(); defer mu.Unlock(); return got }())
	mu.Lock()
	defer mu.Unlock()
	for who := range want {
		require.ElementsMatch(t, want[who], got[who], who)
	}
}
