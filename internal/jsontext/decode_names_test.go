package jsontext

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeDocumentDuplicateAcrossSpellings: a member name written plainly
// (read by name's plain way) and the same name written with an escape (read
// by str) are one name, whichever comes first, at the top level (where
// the names are also heard) and nested, among other members; the top-level
// names heard are the decoded ones, and a name written with an escape is
// never heard as plain.
func TestDecodeDocumentDuplicateAcrossSpellings(t *testing.T) {
	spellings := []struct{ plain, escaped, name string }{
		{`"a"`, `"\u0061"`, "a"},
		{`"amount"`, `"amoun\u0074"`, "amount"},
		{`"a/b"`, `"a\/b"`, "a/b"},
		{`"merchantId12345"`, `"merchantId1234\u0035"`, "merchantId12345"}, // past one word of PlainEnd
		{`"\u0000"`, `"\u0000\u0000"`, ""},                                 // two names: not duplicates
		{`"é"`, `"\u00e9"`, "é"},
		{`"😀"`, `"\ud83d\ude00"`, "😀"},
	}
	for _, sp := range spellings {
		same := sp.name != ""
		for _, pair := range [][2]string{{sp.plain, sp.escaped}, {sp.escaped, sp.plain}} {
			for _, shape := range []string{`{%s:1,%s:2}`, `{%s:1,"x":0,%s:2}`, `{"o":{%s:1,%s:2}}`, `[{"y":1},{%s:1,"z":[],%s:{}}]`} {
				in := fmt.Sprintf(shape, pair[0], pair[1])
				var h heard
				_, err := DecodeDocument([]byte(in), dataDepth, &h)
				if same {
					require.ErrorIs(t, err, ErrDuplicateKey, in)
				} else {
					require.NoError(t, err, in)
				}
				compareWithReference(t, in, dataDepth)
			}
		}
		// Alone, each spelling is heard as the decoded name; the escaped
		// one is not told plain.
		if !same {
			continue
		}
		for _, spelled := range []string{sp.plain, sp.escaped} {
			var h heard
			_, err := DecodeDocument([]byte("{"+spelled+":1}"), dataDepth, &h)
			require.NoError(t, err)
			require.Equal(t, []string{"<object>", sp.name}, h.names, spelled)
			if spelled == sp.escaped {
				require.False(t, h.ascii[1], "%s told plain", spelled)
			}
		}
	}
}
