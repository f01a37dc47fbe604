package jetstream

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/inproc"
	"pigeon/transport/transporttest"
)

// TestTransportConformance runs the session suite on an engine whose
// store is JetStream and whose work-queue leases go through the Cluster.
func TestTransportConformance(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		s, err := Open(t.Context(), nc, &Options{Prefix: freshPrefix()})
		require.NoError(t, err)
		cl, err := NewCluster(t.Context(), s)
		require.NoError(t, err)
		o := transporttest.Options()
		o.Store, o.Cluster = s, cl
		e, err := pigeon.New(context.Background(), o)
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, e.Shutdown(context.Background()))
			require.NoError(t, s.Close(context.Background()))
		})
		return transporttest.Harness{Engine: e, Connect: inproc.Dialer{Engine: e}.Dial, ConnectWith: e.Connect, Trim: transporttest.Trimmer(s)}
	})
}
