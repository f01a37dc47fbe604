package pigeon

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/cond"
)

// A filter in use stays compiled however many other filters are compiled
// meanwhile (by a principal cycling through new ones within its
// FilterRate): the cache used to start afresh when full, so every
// subscriber reconnecting afterwards compiled its filter again, spending
// its own rate. A filter used once in every maxCachedFilters new ones
// stays; one left unused goes within two generations; the cache holds at
// most two generations.
func TestFilterCacheKeepsFiltersInUse(t *testing.T) {
	var c filterCache
	hot, cold := &cond.Condition{}, &cond.Condition{}
	c.put("hot", hot)
	c.put("cold", cold)
	for i := range 10 * maxCachedFilters {
		c.put("other-"+strconv.Itoa(i), &cond.Condition{})
		if i%(maxCachedFilters/2) == 0 {
			require.Same(t, hot, c.get("hot"), "after %d others", i)
		}
		require.LessOrEqual(t, len(c.young)+len(c.old), 2*maxCachedFilters)
	}
	require.Same(t, hot, c.get("hot"))
	require.Nil(t, c.get("cold"), "a filter nobody used for two generations is dropped")
}
