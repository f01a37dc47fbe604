package pigeon_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPublishAllocations bounds what a governed publish allocates:
// bench/compare's payment on eventsSubject, every gate and the audit
// record included, no subscriber. Its data is decoded for the gates in
// memory used again (the flat form, jsontext.DecodeFlat) and no tree of
// maps is built for gates that do not need one; what is left is the
// message's own: the decoder's copy of its data, its id, its stored
// idempotency key and its accepted result. (With its data decoded into
// maps and slabs of its own, a publish took eight more.)
func TestPublishAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled buffers at random")
	}
	e := eventsEngine(t)
	ctx := context.Background()
	pub, err := e.Connect(ctx, "checkout-token", []string{eventsSubject})
	require.NoError(t, err)
	const runs = 200
	keys := make([]string, runs+1) // AllocsPerRun runs once more to warm up
	for i := range keys {
		keys[i] = "k-" + strconv.Itoa(i)
	}
	m := eventsMessage(0)
	i := 0
	allocs := testing.AllocsPerRun(runs, func() {
		m.IdempotencyKey = keys[i]
		i++
		if _, err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 6.0)
}

// raceEnabled is set when the tests run under the race detector
// (race_test.go).
var raceEnabled bool
