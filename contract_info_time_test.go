package pigeon_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A contract's times are read as every Pigeon reader reads a time, RFC
// 3339 proper: an expiry encoding/json alone took (an offset of 24 hours,
// a comma before the fraction, a one-digit hour), which the TypeScript,
// Python and Rust clients refuse, had the Go client renew on a schedule of
// its own. A contract the engine writes reads back the same.
func TestContractInfoTimesAreReadStrictly(t *testing.T) {
	const good = `{"id":"c1","principal":"alice","subjects":[],"policyIds":[],"issuedAt":"2026-12-05T10:00:00Z","expiresAt":"2026-12-05T10:15:00.5+01:00","accountCreatedAt":"2026-01-01T00:00:00Z"}`
	var info pigeon.ContractInfo
	require.NoError(t, json.Unmarshal([]byte(good), &info))
	require.Equal(t, "c1", info.ID)
	require.Equal(t, "alice", info.Principal)
	require.True(t, info.ExpiresAt.Equal(time.Date(2026, 12, 5, 9, 15, 0, 5e8, time.UTC)), "%v", info.ExpiresAt)
	require.True(t, info.AccountCreatedAt.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))

	again, err := json.Marshal(info)
	require.NoError(t, err)
	var back pigeon.ContractInfo
	require.NoError(t, json.Unmarshal(again, &back))
	require.True(t, back.ExpiresAt.Equal(info.ExpiresAt))
	require.True(t, back.IssuedAt.Equal(info.IssuedAt))

	var open pigeon.ContractInfo
	require.NoError(t, json.Unmarshal([]byte(`{"id":"c1","issuedAt":null,"expiresAt":"2026-12-05T10:15:00Z"}`), &open))
	require.True(t, open.IssuedAt.IsZero(), "null is no time")
	require.True(t, open.AccountCreatedAt.IsZero(), "absent is no time")

	for _, tc := range []struct{ name, old, new string }{
		{"an offset of 24 hours", `"expiresAt":"2026-12-05T10:15:00.5+01:00"`, `"expiresAt":"2026-12-05T10:15:00+24:00"`},
		{"a comma before the fraction", `"expiresAt":"2026-12-05T10:15:00.5+01:00"`, `"expiresAt":"2026-12-05T10:15:00,5Z"`},
		{"a one-digit hour", `"issuedAt":"2026-12-05T10:00:00Z"`, `"issuedAt":"2026-12-05T1:00:00Z"`},
		{"lower case", `"issuedAt":"2026-12-05T10:00:00Z"`, `"issuedAt":"2026-12-05t10:00:00z"`},
		{"a date alone", `"accountCreatedAt":"2026-01-01T00:00:00Z"`, `"accountCreatedAt":"2026-01-01"`},
		{"empty", `"expiresAt":"2026-12-05T10:15:00.5+01:00"`, `"expiresAt":""`},
		{"a number", `"expiresAt":"2026-12-05T10:15:00.5+01:00"`, `"expiresAt":1796465700`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(good, tc.old, tc.new, 1)
			require.NotEqual(t, good, text)
			var info pigeon.ContractInfo
			require.Error(t, json.Unmarshal([]byte(text), &info))
		})
	}
}
