package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/seal"
)

// putKeysBody is the body of PUT /v1/accounts/{id}/keys.
func putKeysBody(t *testing.T, keys ...pigeon.PublicKey) string {
	t.Helper()
	if keys == nil {
		keys = []pigeon.PublicKey{}
	}
	b, err := json.Marshal(map[string]any{"keys": keys})
	require.NoError(t, err)
	return string(b)
}

// getKeys is what GET /v1/accounts/{id}/keys answers token about id.
func getKeys(t *testing.T, f *fixture, id, token string) []pigeon.PublicKey {
	t.Helper()
	r := f.do(t, http.MethodGet, "/v1/accounts/"+url.PathEscape(id)+"/keys", token, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var v struct {
		Keys []pigeon.PublicKey `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(r.body, &v))
	return v.Keys
}

// TestAdminCannotPublishAKeyUnderAnotherAccount: the keys an account
// publishes are what every sender seals for and what verifies as the
// account. An admin (or whoever holds an admin token) that could list a
// key of its own under another account would read every payload sealed
// for it from then on, and sign as it, though the account's private keys
// never left its program: the seal's promise that the broker cannot read
// a sealed payload would rest on nobody with the admin role wanting to.
// An admin acting on another account may take keys away and narrow their
// windows (to retire a key), never add one, change one's bytes or widen
// a window; a grant token with the admin role neither, even its own
// account's. The account itself still publishes what it likes.
func TestAdminCannotPublishAKeyUnderAnotherAccount(t *testing.T) {
	f := newFixture(t)
	id := demo.Orders
	path := "/v1/accounts/" + url.PathEscape(id) + "/keys"
	_, err := f.e.CreateAccount(context.Background(), pigeon.Account{ID: id, Roles: []string{pigeon.RoleAdmin}})
	require.NoError(t, err)

	owner, err := seal.GenerateKeys()
	require.NoError(t, err)
	admin, err := seal.GenerateKeys()
	require.NoError(t, err)
	switchAt := f.clock.Now().Add(24 * time.Hour).Truncate(time.Second)
	sig := pigeon.Ed25519PublicKey(owner.SigningKID, owner.SigningPublic)
	enc := pigeon.X25519PublicKey(owner.EncryptionKID, owner.EncryptionPublic)
	enc.NotAfter = switchAt
	r := f.do(t, http.MethodPut, path, "orders-token", putKeysBody(t, sig, enc))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	published := getKeys(t, f, id, "gateway-token")

	adminEnc := pigeon.X25519PublicKey(admin.EncryptionKID, admin.EncryptionPublic)
	adminSig := pigeon.Ed25519PublicKey(admin.SigningKID, admin.SigningPublic)
	swapped := enc
	swapped.Key = adminEnc.Key // the owner's kid, the admin's key
	reopened := enc
	reopened.NotAfter = time.Time{}
	later := enc
	later.NotAfter = switchAt.Add(time.Hour)
	retired := sig // the owner's signing key closed at switchAt
	retired.NotAfter = switchAt

	grant := func(t *testing.T) string {
		r := f.do(t, http.MethodPost, "/v1/grants", "admin-token", `{"account":"`+id+`","roles":["admin"],"ttlMs":60000}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		return r.json(t)["token"].(string)
	}
	refused := []struct {
		name  string
		token func(t *testing.T) string
		keys  []pigeon.PublicKey
	}{
		{"an encryption key of its own beside the owner's", nil, []pigeon.PublicKey{sig, enc, adminEnc}},
		{"a signing key of its own", nil, []pigeon.PublicKey{sig, enc, adminSig}},
		{"its key under the owner's kid", nil, []pigeon.PublicKey{sig, swapped}},
		{"a closed window opened", nil, []pigeon.PublicKey{sig, reopened}},
		{"a window made longer", nil, []pigeon.PublicKey{sig, later}},
		{"only its own key", nil, []pigeon.PublicKey{adminEnc}},
		{"by a grant token with the admin role, on its own account", grant, []pigeon.PublicKey{sig, enc, adminEnc}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			token := "admin-token"
			if tt.token != nil {
				token = tt.token(t)
			}
			f.clock.Advance(2 * time.Second) // past the coalescing of access.denied
			r := f.do(t, http.MethodPut, path, token, putKeysBody(t, tt.keys...))
			require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeForbidden, r.code(t))
			require.Equal(t, published, getKeys(t, f, id, "gateway-token"), "the refused list replaced nothing")

			// Senders still seal for the owner's key.
			k, ok := pigeon.SelectKey(getKeys(t, f, id, "gateway-token"), "", pigeon.UseEnc, f.clock.Now())
			require.True(t, ok)
			require.Equal(t, owner.EncryptionKID, k.KID)
		})
	}
	recs, err := f.e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	denied := 0
	for _, rec := range recs {
		if rec.Type == string(pigeon.EventAccessDenied) && rec.Ref == "PUT /v1/accounts/{id}/keys" {
			denied++
		}
	}
	require.Equal(t, len(refused), denied, "every refusal is audited")

	// Taking keys away and narrowing windows is left to an admin: it
	// retires or withdraws a key it cannot use.
	allowed := []struct {
		name string
		keys []pigeon.PublicKey
	}{
		{"the same list", []pigeon.PublicKey{sig, enc}},
		{"a key retired", []pigeon.PublicKey{retired, enc}},
		{"a key removed", []pigeon.PublicKey{retired}},
		{"every key removed", nil},
	}
	for _, tt := range allowed {
		r := f.do(t, http.MethodPut, path, "admin-token", putKeysBody(t, tt.keys...))
		require.Equal(t, http.StatusOK, r.status, "%s: %s", tt.name, r.body)
	}
	require.Empty(t, getKeys(t, f, id, "gateway-token"))
	// Once removed, a key is not the admin's to put back: only the
	// account's; nor does narrowing start from a removed key's window.
	r = f.do(t, http.MethodPut, path, "admin-token", putKeysBody(t, retired))
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
	next, err := seal.GenerateKeys()
	require.NoError(t, err)
	r = f.do(t, http.MethodPut, path, "orders-token", putKeysBody(t, sig, enc, pigeon.X25519PublicKey(next.EncryptionKID, next.EncryptionPublic)))
	require.Equal(t, http.StatusOK, r.status, "the account publishes its own keys: %s", r.body)
	require.Len(t, getKeys(t, f, id, "gateway-token"), 3)
}

// TestKeyLookupDoesNotTellWhichAccountsExist: any authenticated principal
// reads an account's published keys (senders seal for them, receivers
// verify with them), but the lookup answered 404 for an id with no
// account and 200 for one without keys, so a principal could learn which
// ids (SPIFFE IDs, users of an identity provider) have accounts by asking
// for each. An id without an account is answered as an account that
// publishes no key; accounts that publish keys make themselves known.
func TestKeyLookupDoesNotTellWhichAccountsExist(t *testing.T) {
	f := newFixture(t)
	_, err := f.e.CreateAccount(context.Background(), pigeon.Account{ID: demo.Notifier})
	require.NoError(t, err)

	exists := f.do(t, http.MethodGet, "/v1/accounts/"+url.PathEscape(demo.Notifier)+"/keys", "gateway-token", "")
	for _, id := range []string{"spiffe://merchant-prod/ns/ops/sa/nobody", demo.Auditor} {
		r := f.do(t, http.MethodGet, "/v1/accounts/"+url.PathEscape(id)+"/keys", "gateway-token", "")
		require.Equal(t, exists.status, r.status, "%s: %s", id, r.body)
		require.Equal(t, string(exists.body), string(r.body), "%s", id)
	}
	require.Equal(t, `{"keys":[]}`+"\n", string(exists.body))
}

// TestPublishingKeysShowsTheAccountNoAttributes: an account's attributes
// are the operator's record of it (a status, a risk level, a tenant) that
// deny rules and conditions read; GET /v1/accounts/{id} keeps them to
// admins. PUT /v1/accounts/{id}/keys answered the whole account, so any
// account learned what the operator recorded about it by publishing its
// keys again. The answer holds the account's id, roles and keys; an admin
// still gets the attributes.
func TestPublishingKeysShowsTheAccountNoAttributes(t *testing.T) {
	f := newFixture(t)
	id := demo.Orders
	path := "/v1/accounts/" + url.PathEscape(id) + "/keys"
	_, err := f.e.CreateAccount(context.Background(), pigeon.Account{ID: id,
		Attributes: map[string]string{"team": "orders", "risk": "high"}})
	require.NoError(t, err)
	k, err := seal.GenerateKeys()
	require.NoError(t, err)
	body := putKeysBody(t, pigeon.Ed25519PublicKey(k.SigningKID, k.SigningPublic))

	tests := []struct {
		token string
		attrs bool
	}{
		{"orders-token", false},
		{"admin-token", true},
	}
	for _, tt := range tests {
		t.Run(tt.token, func(t *testing.T) {
			r := f.do(t, http.MethodPut, path, tt.token, body)
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			a := r.json(t)["account"].(map[string]any)
			require.Equal(t, id, a["id"])
			require.Len(t, a["keys"], 1)
			_, has := a["attributes"]
			require.Equal(t, tt.attrs, has, "%s", r.body)
			if !tt.attrs {
				require.NotContains(t, string(r.body), "risk", "only an admin reads the attributes")
			}
		})
	}
}
