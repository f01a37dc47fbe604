package pigeon

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKeysChangeRefBoundsALongActor: an actor's id may be up to 1024
// bytes (an OIDC principal claim), past the room of the ref. The ref still
// fits, still lists or counts every change, and still tells two long
// actors apart that share a long prefix.
func TestKeysChangeRefBoundsALongActor(t *testing.T) {
	next := []PublicKey{{KID: "k1"}, {KID: "k2"}, {KID: "k3"}}
	cases := []struct {
		name string
		id   string
	}{
		{"ascii", strings.Repeat("a", 1024)},
		{"multibyte", strings.Repeat("é", 500)},
		{"at the bound", strings.Repeat("b", maxKeysActor)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, m := range []AuthMethod{AuthToken, AuthGrant} {
				ref := keysChangeRef(&Principal{ID: c.id, Method: m}, nil, next)
				require.LessOrEqual(t, len(ref), maxKeysRef, ref)
				require.Equal(t, ref, auditText(ref), "kept whole by the audit log")
				require.True(t, strings.HasSuffix(ref, ": +k1 +k2 +k3"), ref)
				require.Equal(t, m == AuthGrant, strings.Contains(ref, " via grant:"), ref)
			}
		})
	}
	long := strings.Repeat("x", 900)
	a := keysChangeRef(&Principal{ID: long + "-alice"}, nil, next)
	b := keysChangeRef(&Principal{ID: long + "-bob"}, nil, next)
	require.NotEqual(t, a, b, "two actors sharing a long prefix")
	short := keysChangeRef(&Principal{ID: "alice"}, nil, next)
	require.Equal(t, "by alice: +k1 +k2 +k3", short, "a short id as it is")
}
