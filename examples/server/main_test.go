package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestRun(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, run(ctx, "", &out))
	s := out.String()
	require.Contains(t, s, `"approved":true`)
	require.Contains(t, s, "RAW_PAN_DETECTED (quarantined: true")
	require.Contains(t, s, "NO_PERMITTED_SUBJECTS")
}
