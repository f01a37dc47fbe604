package pigeon_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/predecoded"
)

// TestPredecodedPublishAllocations bounds what the HTTP server's publish
// allocates past its request: bench/compare's payment envelope decoded
// in one pass, its data in the flat form in memory used again
// (internal/predecoded), and published with every gate and the audit
// record, no subscriber: 7, one left to spare. (With its data decoded
// into maps and slabs of its own by the envelope decoder, it took 15.)
func TestPredecodedPublishAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled buffers at random")
	}
	e := eventsEngine(t)
	ctx := context.Background()
	pub, err := e.Connect(ctx, "checkout-token", []string{eventsSubject})
	require.NoError(t, err)
	const runs = 200
	envs := make([][]byte, runs+1) // AllocsPerRun runs once more to warm up
	for i := range envs {
		m := eventsMessage(0)
		m.IdempotencyKey = "k-" + strconv.Itoa(i)
		envs[i], err = json.Marshal(m)
		require.NoError(t, err)
	}
	i := 0
	allocs := testing.AllocsPerRun(runs, func() {
		m, err := predecoded.DecodeMessage(envs[i])
		i++
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pub.Publish(ctx, m.(*pigeon.Message)); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 8.0)
}
