package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// TestGroupLagCountsRetainedMessagesOnly: Stats' lag of a stored group
// the engine has not loaded counts the retained messages past its floor
// that are not done, not the ones retention trimmed (or a purge removed)
// since it last moved: those no consumer can get. Each case stores
// notifications.send messages 1..10, trims through trimmed, and gives the group
// floor and done.
func TestGroupLagCountsRetainedMessagesOnly(t *testing.T) {
	cases := []struct {
		name    string
		trimmed uint64
		floor   uint64
		done    []uint64
		want    uint64
	}{
		{name: "nothing trimmed", floor: 2, done: []uint64{5, 7}, want: 6},
		{name: "trimmed below the floor", trimmed: 2, floor: 3, want: 7},
		{name: "trimmed past the floor", trimmed: 6, floor: 2, done: []uint64{4, 8}, want: 3},
		{name: "trimmed past every done", trimmed: 9, floor: 1, done: []uint64{3, 5}, want: 1},
		{name: "every message trimmed", trimmed: 10, floor: 4, done: []uint64{6}, want: 0},
		{name: "caught up", floor: 10, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := memory.New(nil)
			t.Cleanup(func() { require.NoError(t, st.Close(ctx)) })
			at := time.Now()
			for range 10 {
				_, _, err := st.Append(ctx, store.Message{Subject: "notifications.send", Body: []byte(`{}`), Time: at})
				require.NoError(t, err)
			}
			if tc.trimmed > 0 {
				n, err := st.TrimThrough(ctx, "notifications.send", tc.trimmed)
				require.NoError(t, err)
				require.Equal(t, int(tc.trimmed), n)
			}
			key := store.GroupKey{Subject: "notifications.send", Group: "workers"}
			for seq := uint64(1); seq <= tc.floor; seq++ {
				require.NoError(t, st.MarkDone(ctx, key, seq))
			}
			for _, seq := range tc.done {
				require.NoError(t, st.MarkDone(ctx, key, seq))
			}
			f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
			s, err := f.e.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, []pigeon.GroupStats{{Subject: "notifications.send", Group: "workers", Lag: tc.want}}, s.Groups)
		})
	}
}
