package pigeon

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// appendTime must agree with AppendFormat everywhere, the years it
// formats by hand and the ones it hands over alike.
func TestAppendTime(t *testing.T) {
	zone := time.FixedZone("x", -7*3600-30*60)
	cases := []time.Time{
		time.Date(2026, 11, 29, 17, 54, 39, 123456789, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, zone),
		time.Date(1999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 6, 1, 0, 0, 0, 0, time.UTC),
		{},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		cases = append(cases, time.Unix(0, rng.Int64N(1<<62)).In(zone))
	}
	for _, c := range cases {
		want := c.UTC().Format(timeLayout)
		require.Equal(t, want, string(appendTime(nil, c)), "%v", c)
		require.Equal(t, want, formatTime(c))
	}
}
