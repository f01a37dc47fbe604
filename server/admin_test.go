package server_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

func TestAdminAPIRefusedToNonAdmins(t *testing.T) {
	f := newFixture(t)
	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/accounts", ""},
		{http.MethodPost, "/v1/accounts", `{"id":"x"}`},
		{http.MethodGet, "/v1/accounts/x", ""},
		{http.MethodDelete, "/v1/accounts/x", ""},
		{http.MethodPut, "/v1/accounts/x/roles/r", ""},
		{http.MethodDelete, "/v1/accounts/x/roles/r", ""},
		{http.MethodGet, "/v1/roles", ""},
		{http.MethodGet, "/v1/roles/r", ""},
		{http.MethodPut, "/v1/roles/r", `{"permissions":[]}`},
		{http.MethodDelete, "/v1/roles/r", ""},
		{http.MethodPost, "/v1/grants", `{"account":"x","roles":["r"]}`},
		{http.MethodDelete, "/v1/grants/gr_x", ""},
		// Keys: the account itself may too, but the auditor is not x.
		{http.MethodPut, "/v1/accounts/x/keys", `{"keys":[]}`},
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			r := f.do(t, rt.method, rt.path, "", rt.body)
			require.Equal(t, http.StatusUnauthorized, r.status)
			r = f.do(t, rt.method, rt.path, "auditor-token", rt.body)
			require.Equal(t, http.StatusForbidden, r.status)
			require.Equal(t, pigeon.CodeForbidden, r.code(t))
		})
	}
}

func TestAdminAccountsRolesGrantsAndKeys(t *testing.T) {
	f := newFixture(t)
	id := demo.Orders
	esc := url.PathEscape(id)
	r := f.do(t, http.MethodPost, "/v1/accounts", "admin-token", `{"id":"`+id+`","attributes":{"team":"orders"}}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	require.Equal(t, http.StatusConflict, f.do(t, http.MethodPost, "/v1/accounts", "admin-token", `{"id":"`+id+`"}`).status)
	require.Equal(t, http.StatusBadRequest, f.do(t, http.MethodPost, "/v1/accounts", "admin-token", `{"id":""}`).status)
	require.Equal(t, http.StatusBadRequest, f.do(t, http.MethodPost, "/v1/accounts", "admin-token", `{`).status)

	r = f.do(t, http.MethodGet, "/v1/accounts/"+esc, "admin-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, id, r.json(t)["account"].(map[string]any)["id"])
	require.Equal(t, http.StatusNotFound, f.do(t, http.MethodGet, "/v1/accounts/nobody", "admin-token", "").status)

	r = f.do(t, http.MethodPut, "/v1/roles/notifier", "admin-token", `{"permissions":[{"subject":"notifications.send","operations":["publish"],"selector":"/channel=email"}]}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = f.do(t, http.MethodPut, "/v1/roles/bad", "admin-token", `{"permissions":[{"subject":"notifications.send","operations":["publish"],"selector":"channel"}]}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, pigeon.CodeSelectorInvalid, r.code(t))
	r = f.do(t, http.MethodGet, "/v1/roles", "admin-token", "")
	require.Len(t, r.json(t)["roles"], 1)

	r = f.do(t, http.MethodPut, "/v1/accounts/"+esc+"/roles/notifier", "admin-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, []any{"notifier"}, r.json(t)["account"].(map[string]any)["roles"])

	// A grant token works as a credential until the role is taken away.
	r = f.do(t, http.MethodPost, "/v1/grants", "admin-token", `{"account":"`+id+`","roles":["notifier"],"ttlMs":60000}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	g := r.json(t)
	tok := g["token"].(string)
	require.NotEmpty(t, g["jti"])
	require.NotEmpty(t, g["expiresAt"])
	contract := f.contract(t, tok, "notifications.send")
	m := demo.Notification("k-1")
	m.Data = json.RawMessage(`{"recipientId":"c","channel":"email","templateId":"t"}`)
	r = f.do(t, http.MethodPost, "/v1/messages", tok, msgBody(t, m), "x-pigeon-contract", contract)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)

	r = f.do(t, http.MethodDelete, "/v1/accounts/"+esc+"/roles/notifier", "admin-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	m.IdempotencyKey = "k-2"
	r = f.do(t, http.MethodPost, "/v1/messages", tok, msgBody(t, m), "x-pigeon-contract", contract)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeGrantRevoked, r.code(t))

	// Revoked grants are refused at authentication.
	require.Equal(t, http.StatusOK, f.do(t, http.MethodDelete, "/v1/grants/"+g["jti"].(string), "admin-token", "").status)
	require.Equal(t, http.StatusNotFound, f.do(t, http.MethodDelete, "/v1/grants/gr_nope", "admin-token", "").status)
	require.Equal(t, http.StatusUnauthorized, f.do(t, http.MethodPost, "/v1/contracts", tok, `{"subjects":["notifications.send"]}`).status)

	// Keys: the account itself (or an admin) publishes; anyone authenticated reads.
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	keys, _ := json.Marshal(map[string]any{"keys": []pigeon.PublicKey{pigeon.Ed25519PublicKey("k1", pub)}})
	r = f.do(t, http.MethodPut, "/v1/accounts/"+esc+"/keys", "checkout-token", string(keys))
	require.Equal(t, http.StatusForbidden, r.status, "another principal may not publish the keys")
	// A grant token of the account is not the account: it hands a program
	// roles, not the keys that sign and seal as the account.
	r = f.do(t, http.MethodPut, "/v1/accounts/"+esc+"/roles/notifier", "admin-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = f.do(t, http.MethodPost, "/v1/grants", "admin-token", `{"account":"`+id+`","roles":["notifier"],"ttlMs":60000}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r = f.do(t, http.MethodPut, "/v1/accounts/"+esc+"/keys", r.json(t)["token"].(string), string(keys))
	require.Equal(t, http.StatusForbidden, r.status, "a grant of the account may not publish its keys: %s", r.body)
	r = f.do(t, http.MethodPut, "/v1/accounts/"+esc+"/keys", "orders-token", string(keys))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = f.do(t, http.MethodPut, "/v1/accounts/"+esc+"/keys", "admin-token", string(keys))
	require.Equal(t, http.StatusOK, r.status, "an admin may publish another account's keys: %s", r.body)
	r = f.do(t, http.MethodPut, "/v1/accounts/"+esc+"/keys", "orders-token", `{"keys":[{"kid":"k","use":"sig","alg":"ed25519","key":"!!"}]}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	tooMany := make([]pigeon.PublicKey, pigeon.MaxAccountKeys+1)
	for i := range tooMany {
		tooMany[i] = pigeon.Ed25519PublicKey("k"+strconv.Itoa(i), pub)
	}
	body, _ := json.Marshal(map[string]any{"keys": tooMany})
	r = f.do(t, http.MethodPut, "/v1/accounts/"+esc+"/keys", "orders-token", string(body))
	require.Equal(t, http.StatusBadRequest, r.status, "more keys than an account may publish: %s", r.body)
	r = f.do(t, http.MethodGet, "/v1/accounts/"+esc+"/keys", "gateway-token", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Len(t, r.json(t)["keys"], 1, "the refused list replaced nothing")
	require.Equal(t, http.StatusUnauthorized, f.do(t, http.MethodGet, "/v1/accounts/"+esc+"/keys", "", "").status)

	require.Equal(t, http.StatusOK, f.do(t, http.MethodDelete, "/v1/roles/notifier", "admin-token", "").status)
	require.Equal(t, http.StatusOK, f.do(t, http.MethodDelete, "/v1/accounts/"+esc, "admin-token", "").status)
	require.Equal(t, http.StatusNotFound, f.do(t, http.MethodDelete, "/v1/accounts/"+esc, "admin-token", "").status)
}
