package pigeon_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestKeyWindowAtTheClientsPrecision: an account closed its old signing
// key at a sub-millisecond instant and dated a message between the whole
// millisecond and that instant. Go read the window to the nanosecond and
// admitted the message; the TypeScript and Rust clients read times to the
// millisecond (Python to the microsecond), found the old key already
// closed, and refused what the gate had verified. A key is now valid at t
// only when it is at every precision the clients read.
func TestKeyWindowAtTheClientsPrecision(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return v
	}
	old := pigeon.Ed25519PublicKey("old", pub)
	old.NotAfter = at("2026-11-01T00:00:00.0005Z")
	m := &pigeon.Message{ID: "msg_1", Subject: "signed.events", Time: "2026-11-01T00:00:00.0001Z", Data: json.RawMessage(`{"n":1}`)}
	require.NoError(t, pigeon.SignMessage(m, "old", priv))
	require.NoError(t, pigeon.VerifyMessage(m, pub), "the raw signature is sound")
	requireCode(t, pigeon.VerifyMessageWithKeys(m, []pigeon.PublicKey{old}), pigeon.CodeSignatureInvalid)

	tests := []struct {
		name     string
		nb, na   string
		t        string
		expected bool
	}{
		{"closed within the millisecond (ms readers)", "", "2026-11-01T00:00:00.0005Z", "2026-11-01T00:00:00.0001Z", false},
		{"closed within the microsecond (µs readers)", "", "2026-11-01T00:00:00.0000015Z", "2026-11-01T00:00:00.0000011Z", false},
		{"opened within the millisecond, after the start", "2026-11-01T00:00:00.0005Z", "", "2026-11-01T00:00:00.0009Z", true},
		{"opened within the millisecond, before the start", "2026-11-01T00:00:00.0005Z", "", "2026-11-01T00:00:00.0001Z", false},
		{"whole milliseconds, before the end", "", "2026-11-01T00:00:00.001Z", "2026-11-01T00:00:00Z", true},
		{"whole milliseconds, at the end", "", "2026-11-01T00:00:00.001Z", "2026-11-01T00:00:00.001Z", false},
		{"whole milliseconds, at the start", "2026-11-01T00:00:00.001Z", "", "2026-11-01T00:00:00.001Z", true},
		{"sub-millisecond end, a whole millisecond before", "", "2026-11-01T00:00:00.0015Z", "2026-11-01T00:00:00.0009Z", true},
		{"before 1970, within the window", "1969-12-31T23:59:59.998Z", "1969-12-31T23:59:59.9995Z", "1969-12-31T23:59:59.998Z", true},
		{"before 1970, closed within the millisecond", "", "1969-12-31T23:59:59.9995Z", "1969-12-31T23:59:59.9991Z", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := pigeon.Ed25519PublicKey("k", pub)
			if tt.nb != "" {
				k.NotBefore = at(tt.nb)
			}
			if tt.na != "" {
				k.NotAfter = at(tt.na)
			}
			require.Equal(t, tt.expected, k.ValidAt(at(tt.t)))
		})
	}
}
