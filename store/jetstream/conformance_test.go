package jetstream

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

func TestConformance(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	open := func(t *testing.T, prefix string) *Store {
		s, err := Open(t.Context(), nc, &Options{Prefix: prefix})
		require.NoError(t, err)
		return s
	}
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, freshPrefix())
	}, storetest.Features{
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return open(t, s.(*Store).Prefix())
		},
	})
}
