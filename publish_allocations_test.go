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

// TestPublishAllocations bounds what a governed publish allocates:
// bench/compare's payment on eventsSubject, every gate and the audit
// record included, no subscriber. Its data is decoded for the gates in
// memory used again (the flat form, jsontext.DecodeFlat) and no tree of
// maps is built for gates that do not need one.
//   - in process: what is left is the message's own: the decoder's copy
//     of its data, its id, its stored idempotency key and its accepted
//     result (with its data decoded into maps and slabs of its own, a
//     publish took eight more);
//   - predecoded: what the HTTP server's publish allocates past its
//     request: the envelope decoded in one pass, its data in the flat
//     form (internal/predecoded), then published: 7, one left to spare
//     (with its data decoded into maps by the envelope decoder, 15).
func TestPublishAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled buffers at random")
	}
	const runs = 200 // AllocsPerRun runs once more to warm up
	for _, tt := range []struct {
		name string
		most float64
		// next returns the i-th message of the run, i from 0 to runs.
		next func(t *testing.T) func(i int) *pigeon.Message
	}{
		{"in process", 6, func(t *testing.T) func(int) *pigeon.Message {
			m := eventsMessage(0)
			keys := make([]string, runs+1)
			for i := range keys {
				keys[i] = "k-" + strconv.Itoa(i)
			}
			return func(i int) *pigeon.Message { m.IdempotencyKey = keys[i]; return m }
		}},
		{"predecoded", 8, func(t *testing.T) func(int) *pigeon.Message {
			envs := make([][]byte, runs+1)
			for i := range envs {
				m := eventsMessage(0)
				m.IdempotencyKey = "k-" + strconv.Itoa(i)
				var err error
				envs[i], err = json.Marshal(m)
				require.NoError(t, err)
			}
			return func(i int) *pigeon.Message {
				m, err := predecoded.DecodeMessage(envs[i])
				if err != nil {
					t.Fatal(err)
				}
				return m.(*pigeon.Message)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := eventsEngine(t)
			ctx := context.Background()
			pub, err := e.Connect(ctx, "checkout-token", []string{eventsSubject})
			require.NoError(t, err)
			next, i := tt.next(t), 0
			allocs := testing.AllocsPerRun(runs, func() {
				m := next(i)
				i++
				if _, err := pub.Publish(ctx, m); err != nil {
					t.Fatal(err)
				}
			})
			require.LessOrEqual(t, allocs, tt.most)
		})
	}
}

// raceEnabled is set when the tests run under the race detector
// (race_test.go).
var raceEnabled bool
