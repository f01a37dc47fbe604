package pigeon_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A published key's window is read as every Pigeon reader reads a time,
// RFC 3339 proper: a window encoding/json alone would take (an offset of
// 24 hours or 60 minutes, a comma before the fraction, a one-digit hour)
// made a key listed by a server verify a message in Go and in no other
// client, which reads no time there. null or absent is no bound.
func TestPublishedKeyWindowIsReadStrictly(t *testing.T) {
	key := func(window string) string {
		return `{"kid":"k1","use":"sig","alg":"Ed25519","key":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"` + window + `}`
	}
	for _, tc := range []struct {
		name   string
		window string
		want   time.Time
		bad    bool
	}{
		{name: "absent"},
		{name: "null", window: `,"notBefore":null,"notAfter":null`},
		{name: "utc", window: `,"notBefore":"2026-12-05T10:20:30Z"`, want: time.Date(2026, 12, 5, 10, 20, 30, 0, time.UTC)},
		{name: "nanoseconds and an offset", window: `,"notBefore":"2026-12-05T10:20:30.123456789+01:00"`, want: time.Date(2026, 12, 5, 9, 20, 30, 123456789, time.UTC)},
		{name: "an offset of 24 hours", window: `,"notBefore":"2026-12-05T10:20:30+24:00"`, bad: true},
		{name: "an offset minute of 60", window: `,"notBefore":"2026-12-05T10:20:30+00:60"`, bad: true},
		{name: "a comma before the fraction", window: `,"notBefore":"2026-12-05T10:20:30,5Z"`, bad: true},
		{name: "a one-digit hour", window: `,"notBefore":"2026-12-05T1:20:30Z"`, bad: true},
		{name: "lower case", window: `,"notAfter":"2026-12-05t10:20:30z"`, bad: true},
		{name: "empty", window: `,"notAfter":""`, bad: true},
		{name: "a number", window: `,"notAfter":20261205`, bad: true},
		{name: "a date alone", window: `,"notAfter":"2026-12-05"`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k pigeon.PublicKey
			err := json.Unmarshal([]byte(key(tc.window)), &k)
			if tc.bad {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "k1", k.KID)
			require.Equal(t, pigeon.UseSig, k.Use)
			require.True(t, tc.want.Equal(k.NotBefore), "notBefore %v, want %v", k.NotBefore, tc.want)
			require.True(t, k.NotAfter.IsZero())
			b, err := json.Marshal(k)
			require.NoError(t, err)
			var again pigeon.PublicKey
			require.NoError(t, json.Unmarshal(b, &again))
			require.Equal(t, k.KID, again.KID)
			require.True(t, k.NotBefore.Equal(again.NotBefore), "a key written is read back")
		})
	}
}
