package jetstream

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// An idempotency claim leaves the bucket once its window (and the grace)
// has passed, so the bucket holds only live keys; within the window the
// key is a duplicate, and after it the key is claimed afresh.
func TestIdempotencyClaimsExpire(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	ctx := t.Context()
	s, err := Open(ctx, nc, &Options{Prefix: freshPrefix()})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close(ctx)) }()
	s.claimGrace = 0

	now := time.Now()
	m := store.Message{Subject: "orders", ID: "m1", Time: now, IdemKey: "pay-1", IdemExpires: now.Add(time.Second)}
	_, dup, err := s.Append(ctx, m)
	require.NoError(t, err)
	require.False(t, dup)
	again := m
	again.ID = "m2"
	orig, dup, err := s.Append(ctx, again)
	require.NoError(t, err)
	require.True(t, dup, "a duplicate within the window")
	require.Equal(t, "m1", orig.ID)

	require.Eventually(t, func() bool {
		_, err := s.idem.Get(ctx, token("pay-1"))
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}, 30*time.Second, 100*time.Millisecond, "the claim's TTL removes the key")

	late := m
	late.ID, late.Time, late.IdemExpires = "m3", time.Now(), time.Now().Add(time.Hour)
	_, dup, err = s.Append(ctx, late)
	require.NoError(t, err)
	require.False(t, dup, "after the window the key is new")
	e, err := s.idem.Get(ctx, token("pay-1"))
	require.NoError(t, err)
	require.Contains(t, string(e.Value()), `"m3"`)
}

func TestClaimTTL(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		exp   time.Time
		grace time.Duration
		want  time.Duration
	}{
		{now.Add(time.Hour), time.Minute, time.Hour + time.Minute},
		{now.Add(1500 * time.Millisecond), 0, 2 * time.Second},
		{now.Add(-time.Hour), time.Minute, time.Second},
		{now, 0, time.Second},
	} {
		require.Equal(t, tc.want, claimTTL(tc.exp, now, tc.grace))
	}
}
