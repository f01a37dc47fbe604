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
	for _, want := range []string{"accepted: message", "duplicate: the original", "NO_PERMITTED_SUBJECTS", "SENSITIVE_FIELD_DENIED",
		`"pan":"[REDACTED]"`, "RAW_PAN_DETECTED", "REPLAY_DENIED", "hash chain intact"} {
		require.Contains(t, s, want)
	}
	require.NotContains(t, s, "4111111111111111")
}
