package pigeon_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A handler that changes the message it is handed (its data's bytes in
// place, its fields) changes its own copy only: the other subscribers, a
// later pull and a replay get the message as the gates judged it.
func TestHandlerChangingItsMessageChangesNoOneElses(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "rooms.shared", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Replay: pigeon.ReplayPolicy{Allowed: true},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{dave}}},
				pigeon.OpReceive: {{Effect: "allow", Principals: []string{carol}}},
				pigeon.OpReplay:  {{Effect: "allow", Principals: []string{carol}}},
			},
		})
	})
	reader := f.connect("carol-token", "rooms.shared")
	vandal := func(_ context.Context, d *pigeon.Delivery) error {
		for i := range d.Message.Data {
			d.Message.Data[i] = ' '
		}
		d.Message.Source, d.Message.ID, d.Message.Intent = "someone-else", "msg_forged", "forged"
		return nil
	}
	var (
		mu  sync.Mutex
		got []*pigeon.Message
	)
	keeper := func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, d.Message.Clone())
		return nil
	}
	for _, h := range []pigeon.Handler{vandal, keeper, vandal} {
		sub, err := reader.Subscribe(ctx, "rooms.shared", h)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe(ctx) })
	}

	writer := f.connect("dave-token", "rooms.shared")
	const n = 20
	for range n {
		m := chatIn("lobby", "hello")
		m.Subject = "rooms.shared"
		_, err := writer.Publish(ctx, m)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == n }, 5*time.Second, 5*time.Millisecond)

	pulled, err := reader.Receive(ctx, "rooms.shared", n)
	require.NoError(t, err)
	replayed, err := reader.Replay(ctx, pigeon.ReplayRequest{Subject: "rooms.shared"})
	require.NoError(t, err)
	for name, ms := range map[string][]*pigeon.Message{"pushed": got, "pulled": pulled, "replayed": replayed} {
		require.Len(t, ms, n, name)
		for _, m := range ms {
			var d struct{ Room, Text string }
			require.NoError(t, json.Unmarshal(m.Data, &d), name)
			require.Equal(t, "lobby", d.Room, name)
			require.Equal(t, dave, m.Source, name)
			require.Equal(t, "chat", m.Intent, name)
			require.NotEqual(t, "msg_forged", m.ID, name)
		}
	}
}
