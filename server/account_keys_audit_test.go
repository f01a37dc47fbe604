package server_test

import (
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// encKey is a fresh encryption key named kid.
func encKey(t *testing.T, kid string) pigeon.PublicKey {
	t.Helper()
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	require.NoError(t, err)
	return pigeon.X25519PublicKey(kid, k.PublicKey().Bytes())
}

// sigKey is a fresh signing key named kid.
func sigKey(t *testing.T, kid string) pigeon.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return pigeon.Ed25519PublicKey(kid, pub)
}

// putStatus sends PUT path with body as token and returns the status, for
// use off the test's goroutine.
func putStatus(url, token, body string) (int, error) {
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// TestAdminNarrowingRacingTheAccountsRemoval: PUT /v1/accounts/{id}/keys
// read the account's keys, judged an admin's list against them, then
// replaced them: an admin narrowing a window with the list it sent, at the
// moment the account itself removed a (leaked) key, could put the key back
// when the account's removal landed between the read and the write. The
// judgement and the write are one step under the directory's lock now
// (Engine.PutAccountKeysAs): whichever comes first, the key stays removed.
// The lists are long, of encryption keys (validating them, a scalar
// multiplication each, is what took the time between the read and the
// write), and the race is run 25 times.
func TestAdminNarrowingRacingTheAccountsRemoval(t *testing.T) {
	f := newFixture(t)
	id := demo.Orders
	path := f.hs.URL + "/v1/accounts/" + url.PathEscape(id) + "/keys"
	_, err := f.e.CreateAccount(context.Background(), pigeon.Account{ID: id})
	require.NoError(t, err)
	kept := make([]pigeon.PublicKey, pigeon.MaxAccountKeys-1)
	for i := range kept {
		kept[i] = encKey(t, "enc-"+strconv.Itoa(i))
	}
	leaked := encKey(t, "enc-leaked")
	narrowed := append([]pigeon.PublicKey(nil), kept...)
	narrowed[0].NotAfter = f.clock.Now().Add(time.Hour)
	narrowed = append(narrowed, leaked)
	published := putKeysBody(t, append(append([]pigeon.PublicKey(nil), kept...), leaked)...)
	removal, narrowing := putKeysBody(t, kept...), putKeysBody(t, narrowed...)

	for i := range 25 {
		status, err := putStatus(path, "orders-token", published)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)

		start := make(chan struct{})
		type answer struct {
			status int
			err    error
		}
		admin, account := make(chan answer, 1), make(chan answer, 1)
		go func() {
			<-start
			s, err := putStatus(path, "admin-token", narrowing)
			admin <- answer{s, err}
		}()
		go func() {
			<-start
			s, err := putStatus(path, "orders-token", removal)
			account <- answer{s, err}
		}()
		close(start)
		a, o := <-admin, <-account
		require.NoError(t, a.err)
		require.NoError(t, o.err)
		require.Equal(t, http.StatusOK, o.status)
		require.Contains(t, []int{http.StatusOK, http.StatusForbidden}, a.status)

		keys := getKeys(t, f, id, "gateway-token")
		for _, k := range keys {
			require.NotEqual(t, leaked.KID, k.KID, "round %d: the admin's list (%d) put back the key the account removed", i, a.status)
		}
	}
}

// TestClaimingAnotherAccountsKeyIsAudited: an account listing a key
// another account publishes (to have its signatures verify as its own, or
// its sealed payloads open as sealed by it) was refused with 409 CONFLICT
// and left no trace. The refusal is audited as access.denied (the caller,
// code CONFLICT, the route as ref), a run of them from one principal
// coalesced like every refusal of who asks.
func TestClaimingAnotherAccountsKeyIsAudited(t *testing.T) {
	f := newFixture(t)
	for _, id := range []string{demo.Orders, demo.Gateway} {
		_, err := f.e.CreateAccount(context.Background(), pigeon.Account{ID: id})
		require.NoError(t, err)
	}
	k := sigKey(t, "orders-sig")
	r := f.do(t, http.MethodPut, "/v1/accounts/"+url.PathEscape(demo.Orders)+"/keys", "orders-token", putKeysBody(t, k))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)

	stolen := k
	stolen.KID = "mine"
	for range 3 {
		r = f.do(t, http.MethodPut, "/v1/accounts/"+url.PathEscape(demo.Gateway)+"/keys", "gateway-token", putKeysBody(t, stolen))
		require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	}
	f.clock.Advance(2 * time.Second) // the run's second is over: its count is written
	recs, err := f.e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	var refs []string
	for _, rec := range recs {
		if rec.Type == string(pigeon.EventAccessDenied) && rec.Principal == demo.Gateway {
			require.Equal(t, string(pigeon.CodeConflict), rec.Code)
			refs = append(refs, rec.Ref)
		}
	}
	require.Equal(t, []string{"PUT /v1/accounts/{id}/keys", "coalesced:2 last:PUT /v1/accounts/{id}/keys"}, refs)
}

// TestKeyChangeRecordNamesWhoActed: over HTTP, account.keys.published
// names the principal that made the change, so an admin's removal of an
// account's key is told from the account's own.
func TestKeyChangeRecordNamesWhoActed(t *testing.T) {
	f := newFixture(t)
	id := demo.Orders
	path := "/v1/accounts/" + url.PathEscape(id) + "/keys"
	_, err := f.e.CreateAccount(context.Background(), pigeon.Account{ID: id})
	require.NoError(t, err)
	a, b := sigKey(t, "a"), sigKey(t, "b")
	r := f.do(t, http.MethodPut, path, "orders-token", putKeysBody(t, a, b))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = f.do(t, http.MethodPut, path, "admin-token", putKeysBody(t, a))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)

	recs, err := f.e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	var refs []string
	for _, rec := range recs {
		if rec.Type == string(pigeon.EventAccountKeysPublished) {
			require.Equal(t, id, rec.Principal)
			refs = append(refs, rec.Ref)
		}
	}
	require.Equal(t, []string{"by " + id + ": +a +b", "by " + demo.Administrator + ": -b"}, refs)
}
