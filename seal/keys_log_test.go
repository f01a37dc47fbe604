package seal_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/seal"
)

// TestKeysLogShowsKidsOnly: Keys redacts its private halves when printed
// with fmt, but log/slog's JSON handler does not print: it marshals the
// value with encoding/json, which writes every exported field, the two
// private keys included. A program that logs its keys as structured JSON
// (the broker's own log format) would put them in its logs. Both slog
// handlers must show the kids only, by value and by pointer.
func TestKeysLogShowsKidsOnly(t *testing.T) {
	k := keys(t)
	secrets := []string{
		base64.StdEncoding.EncodeToString(k.SigningPrivate),
		base64.StdEncoding.EncodeToString(k.SigningPrivate.Seed()),
		base64.StdEncoding.EncodeToString(k.EncryptionPrivate),
	}
	handlers := []struct {
		name string
		new  func(*bytes.Buffer) slog.Handler
	}{
		{"json", func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) }},
		{"text", func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) }},
	}
	for _, h := range handlers {
		for _, v := range []any{k, *k} {
			var buf bytes.Buffer
			slog.New(h.new(&buf)).Info("keys", "keys", v)
			out := buf.String()
			for _, s := range secrets {
				require.NotContains(t, out, s, "%s handler, %T", h.name, v)
			}
			require.Contains(t, out, k.SigningKID, "%s handler, %T", h.name, v)
			require.Contains(t, out, k.EncryptionKID, "%s handler, %T", h.name, v)
		}
	}
}

// TestKeysJSONStillHoldsPrivateKeys: logging is redacted, serialising is
// not. A program that stores its keys with encoding/json must get them
// back whole, so Keys keeps no MarshalJSON of its own.
func TestKeysJSONStillHoldsPrivateKeys(t *testing.T) {
	k := keys(t)
	b, err := json.Marshal(k)
	require.NoError(t, err)
	var back seal.Keys
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, k.SigningPrivate, back.SigningPrivate)
	require.Equal(t, k.EncryptionPrivate, back.EncryptionPrivate)
}
