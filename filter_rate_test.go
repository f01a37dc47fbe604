package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestFilterCompilationIsRateLimited: each principal has new subscription
// filters compiled within Options.FilterRate. A filter compiled before
// (by anyone) is free; a new one beyond the rate is refused RATE_LIMITED
// and audited; a filter that does not compile costs a token too; another
// principal has its own bucket.
func TestFilterCompilationIsRateLimited(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) { o.FilterRate = pigeon.RateLimitPolicy{PerSecond: 0.001, Burst: 2} })
	bob := f.connect("bob-token", "chat.messages")
	alice := f.connect("alice-token", "chat.messages")
	subscribe := func(s pigeon.Session, filter string) error {
		sub, err := s.Subscribe(ctx, "chat.messages", nopHandler, pigeon.WithFilter(filter))
		if err == nil {
			require.NoError(t, sub.Unsubscribe(ctx))
		}
		return err
	}
	const a, b, c = `message.data.room == "a"`, `message.data.room == "b"`, `message.data.room == "c"`
	require.NoError(t, subscribe(bob, a))
	require.NoError(t, subscribe(bob, a), "compiled before: free")
	require.NoError(t, subscribe(bob, b))
	requireCode(t, subscribe(bob, c), pigeon.CodeRateLimited)
	require.Equal(t, 1, auditCount(t, f.e, pigeon.EventSubscribeDenied, pigeon.CodeRateLimited))
	require.NoError(t, subscribe(bob, a), "a cached filter goes through when new ones are refused")

	requireCode(t, subscribe(alice, "message.data.room =="), pigeon.CodeFilterInvalid)
	require.NoError(t, subscribe(alice, c), "another principal has its own bucket")
	require.NoError(t, subscribe(alice, b), "a filter bob had compiled is free for alice")
	requireCode(t, subscribe(alice, `message.data.room == "d"`), pigeon.CodeRateLimited) // the invalid one took a token

	f = accessFixture(t, func(o *pigeon.Options) { o.FilterRate = pigeon.RateLimitPolicy{PerSecond: -1} })
	bob = f.connect("bob-token", "chat.messages")
	for i := range 150 {
		require.NoError(t, subscribe(bob, `message.data.n == `+itoa(i)), "no limit when negative")
	}
}
