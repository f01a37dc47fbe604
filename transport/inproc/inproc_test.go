package inproc_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/leakcheck"
	"pigeon/store/memory"
	"pigeon/transport/inproc"
	"pigeon/transport/transporttest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		opts := transporttest.Options()
		st := memory.New(nil)
		opts.Store = st
		e, err := pigeon.New(context.Background(), opts)
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, e.Shutdown(context.Background()))
			require.NoError(t, st.Close(context.Background()))
		})
		return transporttest.Harness{Engine: e, Connect: inproc.Dialer{Engine: e}.Dial, ConnectWith: e.Connect, Trim: transporttest.Trimmer(st)}
	})
}
