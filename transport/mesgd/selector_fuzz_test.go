package mesgd_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/mesgd"
)

// FuzzSelector holds the route path reader to what it promises, for any
// path a client sends: it never panics, refuses only with
// SELECTOR_INVALID, and what it returns it reads back unchanged (its own
// escapes stay escapes). And, as a differential check
// against the selector engine, a value sent with every byte
// percent-escaped, in either case of hex, through a URL as net/http
// parses it, selects exactly the messages whose field holds that value.
func FuzzSelector(f *testing.F) {
	for _, s := range []string{"kind=chat", "room=a%2Fb", "room=caf%C3%A9", "a.b=c/*/x=y", "room=%", "room=a//b", "%2E=%2A", "room=50%25"} {
		f.Add(s, "lobby", false)
	}
	f.Add("", "a/b=c.d*%e", true)
	f.Add("x", "café bar", false)
	f.Fuzz(func(t *testing.T, rest, value string, lower bool) {
		sel, err := mesgd.Selector(mesgd.Prefix + "/" + rest)
		if err != nil {
			require.Equal(t, pigeon.CodeSelectorInvalid, pigeon.ErrorCode(err), "%v", err)
		} else {
			require.True(t, strings.HasPrefix(sel, "/"), sel)
			again, err := mesgd.Selector(mesgd.Prefix + sel)
			require.NoError(t, err, sel)
			require.Equal(t, sel, again, "read back")
			if _, err := pigeon.ParseSelector(sel); err != nil {
				require.Equal(t, pigeon.CodeSelectorInvalid, pigeon.ErrorCode(err), "%v", err)
			}
		}

		if value == "" || !utf8.ValidString(value) || strings.IndexFunc(value, unicode.IsControl) >= 0 || len(value) > 100 {
			return
		}
		escaped := make([]byte, 0, 3*len(value))
		for i := 0; i < len(value); i++ {
			format := "%%%02X"
			if lower {
				format = "%%%02x"
			}
			escaped = fmt.Appendf(escaped, format, value[i])
		}
		u, err := url.Parse("http://broker" + mesgd.Prefix + "/room=" + string(escaped))
		require.NoError(t, err)
		sel, err = mesgd.Selector(mesgd.EscapedPath(u))
		require.NoError(t, err, "%q", value)
		parsed, err := pigeon.ParseSelector(sel)
		if err != nil {
			// The selector engine refuses some values whatever their
			// spelling; the path adds no refusal of its own.
			_, direct := pigeon.ParseSelector("/room=" + selectorEscape(value))
			require.Error(t, direct, "%q refused through the path only: %v", value, err)
			return
		}
		match := func(v string) bool {
			var data any
			b, _ := json.Marshal(map[string]string{"room": v})
			require.NoError(t, json.Unmarshal(b, &data))
			return parsed.Match(data)
		}
		require.True(t, match(value), "%q does not select itself (selector %q)", value, sel)
		require.False(t, match(value+"x"), "%q selects another value (selector %q)", value, sel)
	})
}

// selectorEscape writes v as a selector value: the characters the
// selector syntax reserves as their escapes.
func selectorEscape(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '/', '=', '.', '%', '*':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
