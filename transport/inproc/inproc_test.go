package inproc_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/leakcheck"
	"pigeon/transport/inproc"
	"pigeon/transport/transporttest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		e, err := pigeon.New(context.Background(), transporttest.Options())
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
		return transporttest.Harness{Engine: e, Connect: inproc.Dialer{Engine: e}.Dial, ConnectWith: e.Connect}
	})
}
