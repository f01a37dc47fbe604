package wal

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

func TestConformance(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			opts := &Options{Sync: mode, SegmentSize: 512} // tiny segments: every test crosses several
			storetest.Run(t, func(t *testing.T) store.Store {
				s, err := Open(t.TempDir(), opts)
				require.NoError(t, err)
				return s
			}, storetest.Features{
				Reopen: func(t *testing.T, s store.Store) store.Store {
					s2, err := Open(s.(*Store).Dir(), opts)
					require.NoError(t, err)
					return s2
				},
			})
		})
	}
}
