package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	s := out.String()
	for _, want := range []string{`bob got in lobby from spiffe://chat/alice: "hi bob, lunch?"`, `alice got in lobby from spiffe://chat/bob: "sure, noon"`,
		"ENCRYPTION_REQUIRED", "denied with GRANT_REVOKED", "chain intact"} {
		require.Contains(t, s, want)
	}
}
