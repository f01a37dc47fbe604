package pigeon

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParkedRepliesAreBounded: replies whose requester is not waiting are
// parked within a byte bound per requester and one in all, so a requester
// that abandons requests to services with large replies cannot make the
// broker hold them; a claimed, replaced or expired reply gives its bytes
// back, and a requester with none parked leaves no entry.
func TestParkedRepliesAreBounded(t *testing.T) {
	var tb replyTable
	tb.init()
	now := time.Unix(1_700_000_000, 0)
	reply := func(kb int) *Message {
		return &Message{ID: "msg_r", Data: json.RawMessage(`"` + strings.Repeat("x", kb<<10) + `"`)}
	}
	big := reply(1000) // about 1 MB
	perRequester := int(maxParkedBytesPerRequester / int64(big.sizeHint()))
	require.Greater(t, perRequester, 1)

	// One requester: parked up to its bound, then not kept.
	for i := range perRequester {
		require.Equal(t, replyParked, tb.deliver("req-a"+strconv.Itoa(i), "alice", big, now), "reply %d", i)
	}
	require.Equal(t, replyNotKept, tb.deliver("req-a-over", "alice", big, now))
	require.LessOrEqual(t, tb.byRequester["alice"], int64(maxParkedBytesPerRequester))
	// A small reply still fits her bound where a large one did not.
	require.Equal(t, replyParked, tb.deliver("req-a-small", "alice", reply(1), now))

	// The others are not held back by her, up to the bound of all.
	requesters := 0
	for i := 0; tb.bytes+int64(big.sizeHint()) <= maxParkedBytes; i++ {
		who := "other" + strconv.Itoa(i/perRequester)
		require.Equal(t, replyParked, tb.deliver("req-o"+strconv.Itoa(i), who, big, now))
		requesters = i/perRequester + 1
	}
	require.Greater(t, requesters, 1)
	require.Equal(t, replyNotKept, tb.deliver("req-full", "newcomer", big, now), "the bound of all")
	require.LessOrEqual(t, tb.bytes, int64(maxParkedBytes))

	// A waiting requester gets its reply whatever the bounds.
	ch, err := tb.wait("req-waited", "newcomer")
	require.NoError(t, err)
	require.Equal(t, replyTaken, tb.deliver("req-waited", "newcomer", big, now))
	require.Same(t, big, <-ch)

	// Claiming gives the bytes back, and only the requester may claim.
	before := tb.bytes
	require.Nil(t, tb.claim("req-a0", "mallory"))
	require.Same(t, big, tb.claim("req-a0", "alice"))
	require.Equal(t, before-int64(big.sizeHint()), tb.bytes)
	require.Equal(t, replyParked, tb.deliver("req-a-again", "alice", big, now), "room given back is room again")

	// A second reply to one request replaces the first's bytes.
	small := reply(1)
	before = tb.bytes
	require.Equal(t, replyParked, tb.deliver("req-a-small", "alice", small, now))
	require.Equal(t, before, tb.bytes)

	// Expiry gives everything back and forgets the requesters.
	tb.sweep(now.Add(replyTTL + time.Second))
	require.Empty(t, tb.parked)
	require.Zero(t, tb.bytes)
	require.Empty(t, tb.byRequester)
}
