package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"pigeon"
)

// maxJWKSBytes bounds a key set or discovery document.
const maxJWKSBytes = 1 << 20

// keySet is the cached JSON Web Key Set of one issuer. A kid it does not
// hold triggers a refresh, at most one per minRefresh (callers meanwhile
// wait for the one in flight, or are refused); Run refreshes it
// periodically. Keys stay usable for maxAge after the last successful
// fetch, so an unreachable identity provider does not stop tokens signed
// with known keys until then.
type keySet struct {
	issuer     string
	jwksURL    string // "" until discovery finds it
	client     *http.Client
	minRefresh time.Duration
	maxAge     time.Duration
	now        func() time.Time
	log        *slog.Logger

	mu          sync.Mutex
	keys        map[string][]jose.JSONWebKey // by kid; one kid may name keys of several types
	fetchedAt   time.Time                    // last successful fetch
	lastAttempt time.Time
	lastErr     error         // of the last attempt
	inflight    chan struct{} // closed when the fetch in flight ends
}

// key returns the verification key kid for algorithm alg, refreshing the
// set when kid is unknown (rate-limited). An unknown key is UNAUTHENTICATED
// when the key set was fetched and lacks it, IDENTITY_UNAVAILABLE when the
// identity provider could not be reached.
func (k *keySet) key(ctx context.Context, kid, alg string) (jose.JSONWebKey, error) {
	if key, ok := k.lookup(kid, alg); ok {
		return key, nil
	}
	if err := k.refresh(ctx, false); err != nil && ctx.Err() != nil {
		return jose.JSONWebKey{}, pigeon.WrapError(pigeon.CodeIdentityUnavailable, ctx.Err(), "the signing keys of the issuer could not be fetched in time")
	}
	if key, ok := k.lookup(kid, alg); ok {
		return key, nil
	}
	k.mu.Lock()
	lastErr, fetched := k.lastErr, !k.fetchedAt.IsZero()
	k.mu.Unlock()
	if lastErr != nil {
		return jose.JSONWebKey{}, pigeon.WrapError(pigeon.CodeIdentityUnavailable, lastErr,
			"the token's signing key is not among the cached keys and the identity provider cannot be reached")
	}
	if !fetched {
		return jose.JSONWebKey{}, pigeon.NewError(pigeon.CodeIdentityUnavailable, "the signing keys of the issuer have not been fetched yet")
	}
	return jose.JSONWebKey{}, pigeon.NewError(pigeon.CodeUnauthenticated, "the token's signing key (kid) is unknown to its issuer")
}

// lookup finds kid among keys not older than maxAge: the key of that kid
// that fits alg, or, when none does, its first (which the caller refuses,
// saying why). An empty kid matches the only key of a set that has one.
func (k *keySet) lookup(kid, alg string) (jose.JSONWebKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil || k.now().Sub(k.fetchedAt) >= k.maxAge {
		return jose.JSONWebKey{}, false
	}
	if kid == "" { // the only key of a set that has one
		if len(k.keys) != 1 {
			return jose.JSONWebKey{}, false
		}
		for id := range k.keys {
			kid = id
		}
		if len(k.keys[kid]) != 1 {
			return jose.JSONWebKey{}, false
		}
	}
	keys := k.keys[kid]
	if len(keys) == 0 {
		return jose.JSONWebKey{}, false
	}
	for _, key := range keys {
		if (key.Algorithm == "" || key.Algorithm == alg) && keyFits(key.Key, alg) {
			return key, true
		}
	}
	return keys[0], true
}

// refresh fetches the key set, unless one was attempted less than
// minRefresh ago (unless force: Run's periodic refresh), or joins the
// fetch in flight.
func (k *keySet) refresh(ctx context.Context, force bool) error {
	k.mu.Lock()
	if ch := k.inflight; ch != nil {
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.lastErr
	}
	if !force && !k.lastAttempt.IsZero() && k.now().Sub(k.lastAttempt) < k.minRefresh {
		err := k.lastErr
		k.mu.Unlock()
		return err
	}
	ch := make(chan struct{})
	k.inflight = ch
	k.lastAttempt = k.now()
	k.mu.Unlock()

	// A request's fetch outlives a caller that gives up, since others may
	// be waiting for it; Run's (force) ends with Run's context.
	base := ctx
	if !force {
		base = context.WithoutCancel(ctx)
	}
	fctx, cancel := context.WithTimeout(base, 10*time.Second)
	keys, err := k.fetch(fctx)
	cancel()

	k.mu.Lock()
	k.inflight = nil
	k.lastErr = err
	if err == nil {
		switch {
		case len(keys) == 0:
			k.log.Warn("identity: the issuer publishes no usable signing key; its tokens are refused", "issuer", k.issuer)
		case k.keys != nil && !sameKIDs(k.keys, keys):
			k.log.Info("identity: issuer keys rotated", "issuer", k.issuer, "keys", len(keys))
		}
		k.keys, k.fetchedAt = keys, k.now()
	} else if base.Err() == nil { // a fetch ended by its own context is not the provider's failure
		attrs := []any{"issuer", k.issuer, "reason", err.Error()}
		if !k.fetchedAt.IsZero() {
			attrs = append(attrs, "cachedKeysValidUntil", k.fetchedAt.Add(k.maxAge))
		}
		k.log.Warn("identity: cannot fetch the issuer's signing keys; cached keys stay in use", attrs...)
	}
	k.mu.Unlock()
	close(ch)
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
	}
	return err
}

func sameKIDs(a, b map[string][]jose.JSONWebKey) bool {
	if len(a) != len(b) {
		return false
	}
	for kid := range a {
		if _, ok := b[kid]; !ok {
			return false
		}
	}
	return true
}

// fetch reads the key set (after discovery, when configured).
func (k *keySet) fetch(ctx context.Context) (map[string][]jose.JSONWebKey, error) {
	k.mu.Lock()
	u := k.jwksURL
	k.mu.Unlock()
	if u == "" {
		var doc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := k.getJSON(ctx, strings.TrimSuffix(k.issuer, "/")+"/.well-known/openid-configuration", &doc); err != nil {
			return nil, fmt.Errorf("discovery: %w", err)
		}
		if doc.Issuer != k.issuer {
			return nil, fmt.Errorf("discovery: the document names issuer %q, not %q", doc.Issuer, k.issuer)
		}
		if doc.JWKSURI == "" {
			return nil, errors.New("discovery: the document has no jwks_uri")
		}
		if ju, err := url.Parse(doc.JWKSURI); err != nil || !fetchable(ju) {
			return nil, errors.New("discovery: the document's jwks_uri is not an https URL (http only to a loopback address)")
		}
		u = doc.JWKSURI
		k.mu.Lock()
		k.jwksURL = u
		k.mu.Unlock()
	}
	var set struct {
		Keys json.RawMessage `json:"keys"` // nil: no keys member; "null" and [] are an empty set
	}
	if err := k.getJSON(ctx, u, &set); err != nil {
		return nil, fmt.Errorf("key set: %w", err)
	}
	var list []json.RawMessage
	if set.Keys == nil || json.Unmarshal(set.Keys, &list) != nil {
		return nil, errors.New("key set: the document has no keys array")
	}
	// A key set that was read is the provider's answer, even when it holds
	// no key usable here (none at all, or only keys too weak or of another
	// type): the keys it no longer lists are withdrawn, perhaps because
	// they leaked, and must not stay usable for maxAge as when the
	// provider cannot be reached. Its tokens are refused until it
	// publishes a usable key.
	keys := map[string][]jose.JSONWebKey{}
	for _, raw := range list {
		var key jose.JSONWebKey // a key of a type go-jose does not know is skipped, not fatal
		if key.UnmarshalJSON(raw) == nil && usableKey(key) {
			keys[key.KeyID] = append(keys[key.KeyID], key)
		}
	}
	return keys, nil
}

// usableKey keeps public signature keys of the key types the allowed
// algorithms use; a symmetric or private key is never a verification key.
func usableKey(key jose.JSONWebKey) bool {
	if !key.Valid() || !key.IsPublic() || (key.Use != "" && key.Use != "sig") {
		return false
	}
	switch pk := key.Key.(type) {
	case *rsa.PublicKey:
		return pk.N.BitLen() >= 2048
	case *ecdsa.PublicKey, ed25519.PublicKey:
		return true
	}
	return false
}

func (k *keySet) getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		var ue *url.Error // net/http hides the password, not the query
		if errors.As(err, &ue) {
			ue.URL = shownURL(ue.URL)
		}
		return err
	}
	defer resp.Body.Close()
	shown := shownURL(u)
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJWKSBytes))
		return fmt.Errorf("GET %s: status %d", shown, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return err
	}
	if len(b) > maxJWKSBytes {
		return fmt.Errorf("GET %s: larger than %d bytes", shown, maxJWKSBytes)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", shown, err)
	}
	return nil
}

// shownURL is u as errors and log lines name it: without its userinfo and
// its query, which may hold a credential of the key set's (basic auth, an
// API key).
func shownURL(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return "(a URL that does not parse)"
	}
	pu.User = nil
	if pu.RawQuery != "" || pu.ForceQuery {
		pu.RawQuery, pu.ForceQuery = "…", false
	}
	pu.Fragment, pu.RawFragment = "", ""
	return pu.String()
}
