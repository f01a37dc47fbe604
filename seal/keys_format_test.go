package seal_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/seal"
)

// TestKeysFormatAnyVerbShowsKidsOnly: String covers %v, %s, %q and %x,
// but fmt calls String only for those verbs. With %d (or %o, %b, %c, %U,
// %e, %t) it prints the struct field by field, private keys included
// ("{sig-… [228 144 191 …]}"), and so does any value that holds a Keys
// (a config struct printed with %d, a slice of Keys). Every verb must show
// the kids only, by value, by pointer and inside another value.
func TestKeysFormatAnyVerbShowsKidsOnly(t *testing.T) {
	k := keys(t)
	type holder struct{ K seal.Keys }
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%o", "%O", "%b", "%c", "%U", "%e", "%g", "%t", "%p", "%10d", "%-8x"} {
		for _, v := range []any{k, *k, []seal.Keys{*k}, holder{*k}, &holder{*k}} {
			out := fmt.Sprintf(verb, v)
			for _, priv := range [][]byte{k.SigningPrivate[:8], k.EncryptionPrivate[:8]} {
				// The private bytes as the verb prints a byte slice,
				// without the brackets.
				secret := strings.Trim(fmt.Sprintf(verb, priv), "[] ")
				require.NotContains(t, out, secret, "verb %s, %T", verb, v)
			}
		}
	}
	require.Equal(t, k.String(), fmt.Sprintf("%d", k))
	require.Equal(t, fmt.Sprintf("%q", k.String()), fmt.Sprintf("%q", *k))
	require.Equal(t, fmt.Sprintf("%x", k.String()), fmt.Sprintf("%x", *k))
}
