package pigeon_test

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"pigeon/internal/testclock"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A replay hands over only what the subject's replay policy and the
// caller's contract allow, whatever numbers the request carries: nothing
// accepted before maxAgeMs (and a page of the window's messages, not a
// short one, for a replay from before it), nothing for a sequence range that is empty or
// beyond the end (math.MaxUint64 included), no more than MaxReplay for any
// max, and nothing at all to a principal whose contract holds the subject
// for publish only.
func TestReplayHandsOverOnlyWhatThePolicyAllows(t *testing.T) {
	clk := newClock()
	f := historyFixture(t, clk, 2)
	writer := f.connect("dave-token", "rooms.history")
	for i, text := range []string{"old", "new-1", "new-2", "new-3"} {
		if i == 1 {
			clk.Advance(2 * time.Minute)
		}
		m := chatIn("lobby", text)
		m.Subject = "rooms.history"
		_, err := writer.Publish(ctx, m)
		require.NoError(t, err)
	}
	reader := f.connect("carol-token", "rooms.history")
	texts := func(ms []*pigeon.Message) []string {
		out := []string{}
		for _, m := range ms {
			var d struct{ Text string }
			require.NoError(t, json.Unmarshal(m.Data, &d))
			out = append(out, d.Text)
		}
		return out
	}
	cases := []struct {
		name string
		req  pigeon.ReplayRequest
		want []string
	}{
		// The read starts at the window: a page of older messages left out
		// would have come back short (only new-1) or empty.
		{"older than maxAgeMs left out", pigeon.ReplayRequest{FromSequence: 1, Max: 10}, []string{"new-1", "new-2"}},
		{"from the window on", pigeon.ReplayRequest{FromSequence: 2}, []string{"new-1", "new-2"}},
		{"max beyond MaxReplay", pigeon.ReplayRequest{FromSequence: 2, Max: math.MaxInt}, []string{"new-1", "new-2"}},
		{"negative max", pigeon.ReplayRequest{FromSequence: 2, Max: math.MinInt}, []string{"new-1", "new-2"}},
		{"to before from", pigeon.ReplayRequest{FromSequence: 3, ToSequence: 2}, []string{}},
		{"from the last sequence there is", pigeon.ReplayRequest{FromSequence: math.MaxUint64}, []string{}},
		{"to the last sequence there is", pigeon.ReplayRequest{FromSequence: 4, ToSequence: math.MaxUint64}, []string{"new-3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Subject = "rooms.history"
			got, err := reader.Replay(ctx, tc.req)
			require.NoError(t, err)
			require.Equal(t, tc.want, texts(got))
		})
	}
	t.Run("a contract holding the subject for publish only", func(t *testing.T) {
		_, err := writer.Replay(ctx, pigeon.ReplayRequest{Subject: "rooms.history"})
		requireCode(t, err, pigeon.CodeReplayDenied)
	})
}

// A replay from the start of a long history on a subject with maxAgeMs
// hands over the window's messages: it read a page from the first
// message retained and left out every one of them as too old, so it came
// back empty while messages within the window were retained.
func TestReplayFromTheStartReachesTheWindow(t *testing.T) {
	clk := newClock()
	f := historyFixture(t, clk, 10)
	writer := f.connect("dave-token", "rooms.history")
	publish := func(text string) uint64 {
		m := chatIn("lobby", text)
		m.Subject = "rooms.history"
		res, err := writer.Publish(ctx, m)
		require.NoError(t, err)
		return res.Message.Sequence
	}
	for i := range 95 {
		publish("old-" + strconv.Itoa(i))
	}
	clk.Advance(2 * time.Minute)
	var want []uint64
	for i := range 3 {
		want = append(want, publish("new-"+strconv.Itoa(i)))
	}
	reader := f.connect("carol-token", "rooms.history")
	for _, from := range []uint64{0, 1, 50, 96} {
		got, err := reader.Replay(ctx, pigeon.ReplayRequest{Subject: "rooms.history", FromSequence: from})
		require.NoError(t, err)
		var seqs []uint64
		for _, m := range got {
			seqs = append(seqs, m.Sequence)
		}
		require.Equal(t, want, seqs, "from %d", from)
	}
	got, err := reader.Replay(ctx, pigeon.ReplayRequest{Subject: "rooms.history", FromSequence: 97})
	require.NoError(t, err)
	require.Len(t, got, 2, "a later start still starts there")
}

// historyFixture has rooms.history: pubsub, replayed by carol within
// maxAgeMs 60 s, published by dave, on clk, MaxReplay maxReplay.
func historyFixture(t *testing.T, clk *testclock.Clock, maxReplay int) *fixture {
	return accessFixture(t, func(o *pigeon.Options) {
		o.Now = clk.Now
		o.MaxReplay = maxReplay
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "rooms.history", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Replay: pigeon.ReplayPolicy{Allowed: true, MaxAgeMs: 60_000},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{dave}}},
				pigeon.OpReplay:  {{Effect: "allow", Principals: []string{carol}}},
			},
		})
	})
}
