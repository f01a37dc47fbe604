package identity_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// An attribute claim's value became a principal attribute whatever its
// length or text: a claim the user sets (name, a profile field) with
// kilobytes of text, a newline or ESC reached policy conditions, the
// contract, audit records and the console, bounded only by the size of
// the token, though the directory refuses such an attribute on an account
// (pigeon.MaxAttributeValueLength, no control character). A token whose
// attribute claim breaks those bounds is now refused UNAUTHENTICATED,
// naming the claim and the attribute, never the value. It is not dropped:
// a rule that tests for the attribute's presence (deny when
// "suspended" in principal.attributes) would then let the token through,
// and the attribute of the same name of the principal's account would
// stand in for the token's.
func TestOIDCAttributeClaimsWithinTheDirectorysBounds(t *testing.T) {
	p := newIDP(t)
	p.addKey(t, "rsa-1", jose.RS256, true)
	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL, Audiences: []string{"pigeon"},
		JWKSURL: p.srv.URL + "/jwks", AttributeClaims: map[string]string{"display": "name", "team": "team"}, MinRefreshInterval: time.Minute}}})
	require.NoError(t, err)
	most := strings.Repeat("n", pigeon.MaxAttributeValueLength)
	for _, tc := range []struct {
		name    string
		value   any
		refused string // "": accepted, the attribute equal to the claim
	}{
		{"plain text", "Alice Example", ""},
		{"the longest value", most, ""},
		{"text beyond ASCII", "Zoë 😀 \u00a0 \ufffd", ""},
		{"an integer at the bound", json.Number(strings.Repeat("9", pigeon.MaxAttributeValueLength)), ""},
		{"one byte too long", most + "n", "longer than"},
		{"kilobytes", strings.Repeat("n", 8<<10), "longer than"},
		{"an integer too long", json.Number(strings.Repeat("9", pigeon.MaxAttributeValueLength+1)), "longer than"},
		{"a newline", "Alice\nadmin", "control character"},
		{"a carriage return", "Alice\radmin", "control character"},
		{"a tab", "Alice\tExample", "control character"},
		{"ESC", "Alice\x1b[2J", "control character"},
		{"NUL", "Alice\x00", "control character"},
		{"DEL", "Alice\x7f", "control character"},
		{"C1 NEL", "Alice\u0085", "control character"},
		{"C1 CSI", "Alice\u009b2J", "control character"},
		{"a right-to-left override", "Alice\u202egnp.exe", "control character"},
		{"a line separator", "Alice\u2028admin", "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := p.good("user-1")
			c["name"] = tc.value
			pr, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: p.sign(t, "rsa-1", c)})
			if tc.refused == "" {
				require.NoError(t, err)
				want, _ := tc.value.(string)
				if n, ok := tc.value.(json.Number); ok {
					want = string(n)
				}
				require.Equal(t, map[string]string{"display": want, "team": "payments"}, pr.Attributes)
				return
			}
			require.Nil(t, pr)
			require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%v", err)
			require.ErrorContains(t, err, tc.refused)
			require.ErrorContains(t, err, `the claim "name" of attribute "display"`)
			require.NotContains(t, err.Error(), "Alice", "the value is not quoted")
			require.NotContains(t, err.Error(), "nnnn", "the value is not quoted")
		})
	}
}

// Through the engine: a deny rule that tests for an attribute's presence
// still refuses a token whose attribute claim holds a control character,
// since the token is refused rather than the attribute dropped.
func TestOIDCAttributeClaimRefusedNotDropped(t *testing.T) {
	ctx := context.Background()
	p := newIDP(t)
	p.addKey(t, "rsa-1", jose.RS256, true)
	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL, Audiences: []string{"pigeon"},
		JWKSURL: p.srv.URL + "/jwks", AttributeClaims: map[string]string{"suspended": "suspended"}, MinRefreshInterval: time.Minute}}})
	require.NoError(t, err)
	c := edgeCatalog()
	c.Subjects = append(c.Subjects, pigeon.SubjectPolicy{
		Name: "staff.notes", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"record"},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: {
			{Effect: "deny", When: `"suspended" in principal.attributes`},
			{Effect: "allow", Principals: []string{"*"}},
		}},
	})
	e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: identity.NewChain(nil, identity.Method{Name: pigeon.AuthOIDC, Auth: m}),
		Catalog: c, Region: "uk"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	publish := func(suspended any) error {
		claims := p.good("user-1")
		if suspended != nil {
			claims["suspended"] = suspended
		}
		s, err := e.Connect(ctx, p.sign(t, "rsa-1", claims), []string{"staff.notes"}, pigeon.WithoutAutoRenew())
		if err != nil {
			return err
		}
		defer func() { require.NoError(t, s.Close(ctx)) }()
		_, err = s.Publish(ctx, &pigeon.Message{Type: "e", Subject: "staff.notes", Intent: "record", Data: []byte(`{}`)})
		return err
	}
	require.NoError(t, publish(nil))
	require.Equal(t, pigeon.CodePolicyDenied, pigeon.ErrorCode(publish("yes")))
	for _, v := range []any{"yes\n", "\x1b[0m", strings.Repeat("y", pigeon.MaxAttributeValueLength+1)} {
		err := publish(v)
		require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%q: %v", v, err)
	}
}

// An issuer's attribute claims are checked as its configuration is read:
// at most pigeon.MaxAccountAttributes of them, each attribute name as the
// directory takes one (1 to pigeon.MaxAttributeNameLength bytes, no
// control character) and each claim named.
func TestIssuerAttributeClaimsAreChecked(t *testing.T) {
	many := map[string]string{}
	for i := range pigeon.MaxAccountAttributes + 1 {
		many["a"+strings.Repeat("x", i)] = "team"
	}
	most := map[string]string{}
	for i := range pigeon.MaxAccountAttributes {
		most["a"+strings.Repeat("x", i)] = "team"
	}
	for _, tc := range []struct {
		name   string
		claims map[string]string
		err    string // "": accepted
	}{
		{"none", nil, ""},
		{"ordinary", map[string]string{"team": "team", "display": "name", "tenant": "org.id"}, ""},
		{"as many as an account holds", most, ""},
		{"the longest name", map[string]string{strings.Repeat("a", pigeon.MaxAttributeNameLength): "team"}, ""},
		{"more than an account holds", many, "attribute claims"},
		{"an empty attribute name", map[string]string{"": "team"}, "attribute name is empty"},
		{"a name too long", map[string]string{strings.Repeat("a", pigeon.MaxAttributeNameLength+1): "team"}, "attribute name is"},
		{"a name with a newline", map[string]string{"team\nadmin": "team"}, "control character"},
		{"a name with ESC", map[string]string{"te\x1bam": "team"}, "control character"},
		{"a name with C1", map[string]string{"te\u0085am": "team"}, "control character"},
		{"no claim named", map[string]string{"team": ""}, "names no claim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := identity.CheckIssuer(identity.Issuer{URL: "https://idp.example.com", Audiences: []string{"pigeon"}, AttributeClaims: tc.claims})
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			_, err = identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: "https://idp.example.com",
				Audiences: []string{"pigeon"}, AttributeClaims: tc.claims}}})
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// What a token may carry as an attribute value is what the directory
// takes on an account (pigeon.Engine.CreateAccount): identity keeps its
// own copy of the bounds, held to the engine's here.
func TestAttributeValueBoundsAreTheEngines(t *testing.T) {
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	p := newIDP(t)
	p.addKey(t, "rsa-1", jose.RS256, true)
	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL, Audiences: []string{"pigeon"},
		JWKSURL: p.srv.URL + "/jwks", AttributeClaims: map[string]string{"display": "name"}, MinRefreshInterval: time.Minute}}})
	require.NoError(t, err)
	for i, v := range []string{"", "Alice", "Zoë", "\u00a0", "\ufffd", "\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u2027", "\u2028",
		"\u2029", "\u202a", "\u202e", "\u202f", "\u2065", "\u2066", "\u2069", "\u206a", "\u061b", "\u061c", "\u061d", "a\tb", "a\nb",
		"\x00", "\x1f", "\x7f", "\u0080", "\u009f", "\u00a0x", strings.Repeat("v", pigeon.MaxAttributeValueLength), strings.Repeat("v", pigeon.MaxAttributeValueLength+1),
		strings.Repeat("é", pigeon.MaxAttributeValueLength/2), strings.Repeat("é", pigeon.MaxAttributeValueLength/2) + "x"} {
		_, aerr := e.CreateAccount(ctx, pigeon.Account{ID: "acct-" + strconv.Itoa(i), Attributes: map[string]string{"display": v}})
		c := p.good("user-1")
		c["name"] = v
		_, err := m.AuthenticateCredential(ctx, pigeon.Credential{Bearer: p.sign(t, "rsa-1", c)})
		require.Equal(t, aerr == nil, err == nil, "%q: the engine says %v, the token %v", v, aerr, err)
	}
}
