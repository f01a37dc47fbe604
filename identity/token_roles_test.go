package identity_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
	"pigeon/internal/testlog"
)

// The roles of a token's roles claim were taken whatever their text: a
// role holding a newline, NUL, a space-like or look-alike Unicode
// character, a "/.." segment or 10 KiB of text became a role of the
// principal, and so reached audit records, logs and policy conditions,
// though no role of the broker could bear that name (pigeon.Engine.PutRole
// refuses it). A role that is not a role name is now dropped, the rest of
// the token standing (a provider may carry roles of other applications),
// and a warning, once a minute at most, says how many were dropped; an
// issuer configured to assert such a role (Issuer.Roles) is refused as
// its config is read.
func TestTokenRolesMustBeRoleNames(t *testing.T) {
	long := strings.Repeat("r", pigeon.MaxIDLength)
	for _, tc := range []struct {
		name    string
		claim   any
		want    []string
		dropped bool
	}{
		{"role names stand", []any{"reader", "team.lead", "ns:ops", "a@b", "x/y", "under_score", long}, []string{"a@b", "ns:ops", "reader", long, "team.lead", "under_score", "x/y"}, false},
		{"a newline", []any{"reader", "writer\nadmin"}, []string{"reader"}, true},
		{"NUL", []any{"reader", "writer\x00"}, []string{"reader"}, true},
		{"a look-alike", []any{"reader", "writ\u0435r"}, []string{"reader"}, true},
		{"a no-break space", []any{"reader", "writer\u00a0x"}, []string{"reader"}, true},
		{"U+FFFD", []any{"reader", "writer\ufffd"}, []string{"reader"}, true},
		{"a dot-dot segment", []any{"reader", "x/../y"}, []string{"reader"}, true},
		{"a dot segment", []any{"reader", "./y"}, []string{"reader"}, true},
		{"too long", []any{"reader", long + "r"}, []string{"reader"}, true},
		{"a space-separated string", "reader bad\x01role", []string{"reader"}, true},
		{"only bad roles", []any{"a b", "c\td"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newIDP(t)
			p.addKey(t, "rsa-1", jose.RS256, true)
			logs := &testlog.Buffer{}
			m, err := identity.NewOIDC(&identity.OIDCOptions{Logger: logs.Logger(), Issuers: []identity.Issuer{{URL: p.srv.URL,
				Audiences: []string{"pigeon"}, JWKSURL: p.srv.URL + "/jwks", RolesClaim: "roles", MinRefreshInterval: time.Minute}}})
			require.NoError(t, err)
			c := p.good("user-1")
			c["roles"] = tc.claim
			pr, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: p.sign(t, "rsa-1", c)})
			require.NoError(t, err, "the token stands")
			require.Equal(t, "user-1", pr.ID)
			require.Equal(t, tc.want, pr.Roles)
			if tc.dropped {
				require.Contains(t, logs.String(), "roles dropped from a token")
				require.Contains(t, logs.String(), "not a role name")
				_, err = m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: p.sign(t, "rsa-1", c)})
				require.NoError(t, err)
				require.Equal(t, 1, strings.Count(logs.String(), "roles dropped"), "logged once a minute at most")
			} else {
				require.NotContains(t, logs.String(), "roles dropped")
			}
		})
	}
	for _, bad := range []string{"", "a b", "writ\u0435r", "x/..", strings.Repeat("r", pigeon.MaxIDLength+1)} {
		_, err := identity.CheckIssuer(identity.Issuer{URL: "https://idp.example.com", Audiences: []string{"pigeon"}, Roles: []string{bad}})
		require.Error(t, err, "%q", bad)
	}
	_, err := identity.CheckIssuer(identity.Issuer{URL: "https://idp.example.com", Audiences: []string{"pigeon"}, Roles: []string{"reader", "ns:ops"}})
	require.NoError(t, err)
}

// What a token may carry as a role is what the engine takes as a role name
// (pigeon.Engine.PutRole): identity keeps its own copy of the syntax, held
// to the engine's here.
func TestRoleNameSyntaxIsTheEngines(t *testing.T) {
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	p := newIDP(t)
	p.addKey(t, "rsa-1", jose.RS256, true)
	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL,
		Audiences: []string{"pigeon"}, JWKSURL: p.srv.URL + "/jwks", RolesClaim: "roles", MinRefreshInterval: time.Minute}}})
	require.NoError(t, err)
	for _, r := range []string{"reader", "a.b_c-d:e@f/g", "x/y/z", ".", "..", "a/.", "./a", "a/../b", "...", "a..b", ".hidden",
		"a b", "a\tb", "\x00", "\u00e9", "\u0435", "\ufffd", "a,b", "a;b", "a*b", "a\"b", "a\\b", "~a", "a+b", "a=b", "a%b",
		strings.Repeat("r", pigeon.MaxIDLength), strings.Repeat("r", pigeon.MaxIDLength+1)} {
		_, perr := e.PutRole(ctx, pigeon.Role{Name: r})
		c := p.good("user-1")
		c["roles"] = []any{r}
		pr, err := m.AuthenticateCredential(ctx, pigeon.Credential{Bearer: p.sign(t, "rsa-1", c)})
		require.NoError(t, err)
		require.Equal(t, perr == nil, slices.Contains(pr.Roles, r), "%q: the engine says %v", r, perr)
	}
}
