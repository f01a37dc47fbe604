package pigeon_test

import (
	"context"
	"crypto/ed25519"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// startingTwin is a memory store shared with another broker that, like a
// broker starting at the same instant on a cluster, does not see the grant
// key at its first look: the other broker creates it in between.
type startingTwin struct {
	*memory.Store
	looked atomic.Bool
}

func (s *startingTwin) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	if bucket == "broker" && key == "grant-key" && !s.looked.Swap(true) {
		return nil, store.ErrNotFound
	}
	return s.Store.Get(ctx, bucket, key)
}

// Two brokers that share a store and start at once sign grant tokens with
// one key, so each accepts the other's: the key is created once
// (store.KVCreator), and the broker that lost the race reads the winner's.
// Before, each put its own key, the last write won in the store, and until
// a restart each broker refused the other's tokens.
func TestBrokersStartingAtOnceShareTheGrantKey(t *testing.T) {
	st := memory.New(nil)
	a := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
	twin := &startingTwin{Store: st}
	b := accessFixture(t, func(o *pigeon.Options) { o.Store = twin })
	require.True(t, twin.looked.Load(), "the second broker looked for the key before the first had made it")
	stored, err := st.Get(ctx, "broker", "grant-key")
	require.NoError(t, err)
	want := ed25519.PrivateKey(stored).Public().(ed25519.PublicKey)
	require.Equal(t, []byte(want), a.e.GrantPublicKey(), "the first broker signs with the stored key")
	require.Equal(t, []byte(want), b.e.GrantPublicKey(), "so does the one that lost the race")
}
