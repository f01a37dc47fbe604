package pigeon_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A static token's principal, roles and attributes were taken from the
// tokens file as written: an attribute of kilobytes, or holding a newline
// or ESC, reached policy conditions, contracts, audit records and the
// console, though the directory refuses it on an account; a principal or
// role that no account or role could bear (a space, a look-alike letter,
// 10 KiB) was served. StaticToken.Validate holds a token to the
// directory's rules, and its refusal names the principal, quoted and
// cut, never the token.
func TestStaticTokenValidate(t *testing.T) {
	const secret = "s3cr3t-Token-9"
	good := func() pigeon.StaticToken {
		return pigeon.StaticToken{Token: secret, Principal: "spiffe://merchant-prod/ns/ops/sa/admin", Roles: []string{"admin", "ns:ops"},
			Attributes: map[string]string{"team": "ops", "display": "Zoë Example"}}
	}
	many := map[string]string{}
	for i := range pigeon.MaxAccountAttributes + 1 {
		many["a"+strings.Repeat("x", i)] = "v"
	}
	for _, tc := range []struct {
		name string
		mod  func(*pigeon.StaticToken)
		err  string // "": valid
	}{
		{"valid", func(*pigeon.StaticToken) {}, ""},
		{"no roles or attributes", func(s *pigeon.StaticToken) { s.Roles, s.Attributes = nil, nil }, ""},
		{"the longest principal", func(s *pigeon.StaticToken) { s.Principal = strings.Repeat("p", pigeon.MaxIDLength) }, ""},
		{"the longest value", func(s *pigeon.StaticToken) {
			s.Attributes["team"] = strings.Repeat("v", pigeon.MaxAttributeValueLength)
		}, ""},
		{"no token", func(s *pigeon.StaticToken) { s.Token = "" }, "has no token"},
		{"no principal", func(s *pigeon.StaticToken) { s.Principal = "" }, "has no principal"},
		{"a principal too long", func(s *pigeon.StaticToken) { s.Principal = strings.Repeat("p", pigeon.MaxIDLength+1) }, "must be 1 to"},
		{"a newline in the principal", func(s *pigeon.StaticToken) { s.Principal = "svc\nadmin" }, "outside letters"},
		{"ESC in the principal", func(s *pigeon.StaticToken) { s.Principal = "svc\x1b[2J" }, "outside letters"},
		{"a space in the principal", func(s *pigeon.StaticToken) { s.Principal = "svc admin" }, "outside letters"},
		{"a look-alike in the principal", func(s *pigeon.StaticToken) { s.Principal = "\u0430dmin" }, "outside letters"},
		{"a dot-dot segment", func(s *pigeon.StaticToken) { s.Principal = "svc/../admin" }, "path segment"},
		{"a role with a newline", func(s *pigeon.StaticToken) { s.Roles = []string{"reader", "writer\nadmin"} }, "a role name"},
		{"an empty role", func(s *pigeon.StaticToken) { s.Roles = []string{""} }, "a role name"},
		{"a value too long", func(s *pigeon.StaticToken) {
			s.Attributes["team"] = strings.Repeat("v", pigeon.MaxAttributeValueLength+1)
		}, "more than"},
		{"a newline in a value", func(s *pigeon.StaticToken) { s.Attributes["team"] = "ops\nadmin" }, "control or formatting character"},
		{"ESC in a value", func(s *pigeon.StaticToken) { s.Attributes["team"] = "ops\x1b[2J" }, "control or formatting character"},
		{"C1 in a value", func(s *pigeon.StaticToken) { s.Attributes["team"] = "ops\u009b2J" }, "control or formatting character"},
		{"a control character in a name", func(s *pigeon.StaticToken) { s.Attributes["te\tam"] = "ops" }, "control or formatting character"},
		{"an empty attribute name", func(s *pigeon.StaticToken) { s.Attributes[""] = "ops" }, "attribute name is empty"},
		{"a name too long", func(s *pigeon.StaticToken) {
			s.Attributes[strings.Repeat("n", pigeon.MaxAttributeNameLength+1)] = "ops"
		}, "more than"},
		{"too many attributes", func(s *pigeon.StaticToken) { s.Attributes = many }, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := good()
			tc.mod(&tok)
			err := tok.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.Equal(t, pigeon.CodeInvalidArgument, pigeon.ErrorCode(err), "%v", err)
			require.ErrorContains(t, err, tc.err)
			require.NotContains(t, err.Error(), secret, "the token is not named")
			require.NotContains(t, err.Error(), "\n", "the principal is quoted")
			require.NotContains(t, err.Error(), "\x1b", "the principal is quoted")
			require.Less(t, len(err.Error()), 400, "a long principal is cut")
			if tok.Principal != "" {
				require.ErrorContains(t, err, "principal "+shownPrincipal(tok.Principal))
			}
		})
	}
}

// shownPrincipal is the principal as a refusal names it: its first 64
// bytes, Go-quoted.
func shownPrincipal(s string) string {
	return strconv.Quote(s[:min(len(s), 64)])
}
