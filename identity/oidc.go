package identity

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-jose/go-jose/v4"
	josejson "github.com/go-jose/go-jose/v4/json"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"pigeon"
)

// Defaults of Issuer.
const (
	DefaultLeeway             = 30 * time.Second
	MaxLeeway                 = 5 * time.Minute
	DefaultRefreshInterval    = 15 * time.Minute
	DefaultMinRefreshInterval = 10 * time.Second
	DefaultMaxKeyAge          = 24 * time.Hour
	DefaultPrincipalClaim     = "sub"
	DefaultMaxLifetime        = 24 * time.Hour
	MostMaxLifetime           = 366 * 24 * time.Hour
)

// DefaultAlgorithms are the algorithms accepted when an Issuer names none.
var DefaultAlgorithms = []string{"RS256", "ES256", "EdDSA"}

// allowedAlgorithms are the only algorithms an Issuer may name: public-key
// signatures. "none" and the HMAC family never verify a bearer token.
var allowedAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// maxTokenBytes bounds a bearer token.
const maxTokenBytes = 16 << 10

// Issuer is an identity provider whose JWTs are accepted as bearer tokens.
type Issuer struct {
	// URL is the issuer: the exact iss claim, and the base of discovery.
	URL string
	// Audiences: the token's aud must name at least one of them.
	Audiences []string
	// Clients, when not empty, are the client applications whose tokens
	// sign in: the token's azp (OpenID Connect's authorized party) or, in
	// its absence, client_id (RFC 9068's access tokens) must be one of
	// them. An issuer serves many applications, and one audience may be
	// shared among them (an API's, say); without a list, a token issued to
	// any of its applications for the audience signs in. A token that
	// names neither claim is refused when the list is set.
	Clients []string
	// JWKSURL is the key set; empty: found by OpenID Connect discovery
	// (URL + /.well-known/openid-configuration). Keys are read over HTTPS
	// only (plain HTTP only from a loopback address): this URL, the
	// issuer's when it is discovered, the jwks_uri of the discovery
	// document and every redirect.
	JWKSURL string
	// Algorithms accepted (default DefaultAlgorithms); only public-key
	// signature algorithms may be named.
	Algorithms []string
	// PrincipalClaim names the claim that is the principal (default
	// "sub": a string of text, without control characters or U+FFFD;
	// "email" and "phone_number", which users may set, count only when
	// the token's email_verified or phone_number_verified is true, as do
	// attribute claims of those names);
	// RolesClaim the claim holding roles (an array of strings or a
	// space-separated string; empty: none; a role that is not a role
	// name, 1 to pigeon.MaxIDLength bytes of ASCII letters, digits and
	// . _ - : @ /, is dropped and logged); AttributeClaims maps attribute
	// names to the claims whose values become them. A claim name may be a
	// dotted path into nested objects ("realm_access.roles"). Attribute
	// names are held to the directory's bounds as the configuration is
	// read: at most pigeon.MaxAccountAttributes of them, each 1 to
	// pigeon.MaxAttributeNameLength bytes without a control character. A
	// token whose attribute claim is longer than
	// pigeon.MaxAttributeValueLength bytes or holds a control character
	// (C0, tab and newline included, DEL, C1) is refused: see
	// attributeValue.
	PrincipalClaim  string
	RolesClaim      string
	AttributeClaims map[string]string
	// Roles are the roles this issuer may assert through RolesClaim (role
	// names, as above): a role of the claim not among them is dropped.
	// Empty: any role but the broker's own, admin and auditor
	// (pigeon.RoleAdmin, pigeon.RoleAuditor), which open the HTTP API's
	// account, grant, audit and quarantine routes, and programs
	// (server.RolePrograms), which opens the program routes, and bridge
	// (pigeon.RoleBridge), which lets a client publish at a depth: a
	// provider asserts those only when listed here, so that one whose users or
	// client applications may set their own roles does not make them the
	// broker's administrators.
	Roles []string
	// PrincipalPrefix is put before the principal claim to make the
	// principal ("partner:" makes "alice" partner:alice). Issuers listed
	// together must have distinct prefixes (one of them may have none):
	// otherwise a subject of one would be the same principal as the same
	// subject of another, and one provider could sign in as the other's
	// users. A principal that starts with the longer prefix of another
	// issuer is refused (beside "partner:", the subject "partner:alice"
	// of an issuer of no prefix would be the partner's alice). At most
	// 256 bytes of text.
	PrincipalPrefix string
	// TrustDomains are the SPIFFE trust domains whose IDs this issuer may
	// assert as principals (JWT-SVIDs of a SPIRE server, say). Policies
	// name mTLS workloads by their SPIFFE IDs, so a principal claim that
	// starts "spiffe:" (in any case) is refused unless it is a valid
	// SPIFFE ID, with a path, of one of these: otherwise an identity
	// provider (one whose users choose their names, say) could act as any
	// workload. Empty: the issuer asserts none.
	TrustDomains []string
	// Leeway tolerates clock skew on exp, nbf and iat (default 30 s, at
	// most 5 min).
	Leeway time.Duration
	// MaxLifetime is the longest a token may live (default 24 h, at most
	// 366 days): one whose exp is further than this past its iat, or past
	// the clock when it is presented, is refused (beyond the leeway). A
	// bearer token is used by whoever holds it; a provider misconfigured
	// to issue tokens for a year, or a token minted for another use, would
	// otherwise sign in for as long as it says.
	MaxLifetime time.Duration
	// RefreshInterval is how often Run refetches the key set (default 15
	// min); MinRefreshInterval the shortest time between two fetches caused
	// by unknown key ids (default 10 s); MaxKeyAge how long fetched keys
	// stay usable when the provider cannot be reached (default 24 h).
	RefreshInterval, MinRefreshInterval, MaxKeyAge time.Duration
}

// OIDCOptions configure OIDC.
type OIDCOptions struct {
	Issuers []Issuer
	// HTTPClient fetches discovery documents and key sets (default: a
	// client with a 10 s timeout).
	HTTPClient *http.Client
	// Logger receives key refreshes and their failures. Default: discard.
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// OIDC authenticates JWT bearer tokens of configured issuers, verified with
// go-jose against each issuer's JSON Web Key Set. A token is recognized by
// its iss claim; one whose issuer is not configured is left to the next
// method. The principal's Expires is the token's exp plus the issuer's
// Leeway, the instant after which the token itself is refused. It is safe
// for concurrent use.
type OIDC struct {
	issuers map[string]*issuer
	now     func() time.Time
}

type issuer struct {
	cfg  Issuer
	algs []jose.SignatureAlgorithm
	keys *keySet
	// shadows are the longer principal prefixes of the other issuers
	// that start with this one's: a principal of this issuer starting
	// with one of them would be that issuer's.
	shadows []string
	// attrs are the names of cfg.AttributeClaims, sorted: a token with
	// several values out of bounds is refused naming the same one.
	attrs []string
	log   *slog.Logger
	// droppedWarned is when roles dropped from a token were last logged
	// (unix nanoseconds; see roleNamesDropped).
	droppedWarned atomic.Int64
}

var _ pigeon.CredentialAuthenticator = (*OIDC)(nil)

// NewOIDC checks opts and returns the method. It fetches nothing: keys are
// fetched by Run, or at the first token.
func NewOIDC(opts *OIDCOptions) (*OIDC, error) {
	if opts == nil || len(opts.Issuers) == 0 {
		return nil, errors.New("identity: OIDC needs at least one issuer")
	}
	o := *opts
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	o.HTTPClient = keyClient(o.HTTPClient)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	m := &OIDC{issuers: map[string]*issuer{}, now: o.Now}
	for _, in := range o.Issuers {
		is, err := newIssuer(in, &o)
		if err != nil {
			return nil, err
		}
		if m.issuers[is.cfg.URL] != nil {
			return nil, fmt.Errorf("identity: issuer %q is listed twice", in.URL)
		}
		for _, other := range m.issuers {
			if other.cfg.PrincipalPrefix == is.cfg.PrincipalPrefix {
				return nil, fmt.Errorf("identity: issuers %q and %q both make principals with the prefix %q, so the same subject from each would be one principal: give them distinct principal_prefix values",
					other.cfg.URL, is.cfg.URL, is.cfg.PrincipalPrefix)
			}
		}
		m.issuers[is.cfg.URL] = is
	}
	for _, is := range m.issuers {
		for _, other := range m.issuers {
			if p := other.cfg.PrincipalPrefix; len(p) > len(is.cfg.PrincipalPrefix) && strings.HasPrefix(p, is.cfg.PrincipalPrefix) {
				is.shadows = append(is.shadows, p)
			}
		}
	}
	return m, nil
}

// client is the application a token was issued to: its azp claim, or its
// client_id when it has no azp; "" when it names none (or not as a string).
func client(claims map[string]any) string {
	v, ok := claims["azp"]
	if !ok {
		v = claims["client_id"]
	}
	s, _ := v.(string)
	return s
}

// CheckIssuer validates one issuer's configuration and returns it with
// its defaults.
func CheckIssuer(in Issuer) (Issuer, error) {
	c := in
	u, err := url.Parse(c.URL)
	if c.URL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return c, fmt.Errorf("issuer %q: must be an http(s) URL", c.URL)
	}
	if len(c.Audiences) == 0 {
		return c, fmt.Errorf("issuer %q: needs at least one audience", c.URL)
	}
	if slices.Contains(c.Audiences, "") {
		// A token whose aud is the empty string (or a list holding it)
		// would be for this broker: any token of the issuer could be.
		return c, fmt.Errorf("issuer %q: an audience may not be empty", c.URL)
	}
	if slices.Contains(c.Clients, "") {
		return c, fmt.Errorf("issuer %q: a client may not be empty", c.URL)
	}
	if c.JWKSURL != "" {
		if u, err := url.Parse(c.JWKSURL); err != nil || !fetchable(u) {
			return c, fmt.Errorf("issuer %q: jwks URL %q must be an https URL (http only to a loopback address)", c.URL, shownURL(c.JWKSURL))
		}
	} else if !fetchable(u) {
		// Discovery reads the issuer's document, which names the keys.
		return c, fmt.Errorf("issuer %q: discovery needs an https issuer URL (http only to a loopback address), or give jwks_url", c.URL)
	}
	if len(c.PrincipalPrefix) > 256 || !utf8.ValidString(c.PrincipalPrefix) || strings.ContainsFunc(c.PrincipalPrefix, notNameRune) {
		return c, fmt.Errorf("issuer %q: the principal prefix must be at most 256 bytes of text", c.URL)
	}
	c.Roles = slices.Clone(c.Roles)
	for _, r := range c.Roles {
		if !roleName(r) {
			return c, fmt.Errorf("issuer %q: role %q is not a role name (1 to %d bytes of letters, digits and . _ - : @ /)", c.URL, r, pigeon.MaxIDLength)
		}
	}
	if err := checkAttributeClaims(c.AttributeClaims); err != nil {
		return c, fmt.Errorf("issuer %q: %w", c.URL, err)
	}
	c.AttributeClaims = maps.Clone(c.AttributeClaims)
	c.TrustDomains = slices.Clone(c.TrustDomains)
	for _, d := range c.TrustDomains {
		if td, err := spiffeid.TrustDomainFromString(d); err != nil || td.Name() != d {
			return c, fmt.Errorf("issuer %q: %q is not a SPIFFE trust domain name (lower case, no scheme)", c.URL, d)
		}
	}
	if len(c.Algorithms) == 0 {
		c.Algorithms = DefaultAlgorithms
	}
	c.Algorithms = slices.Clone(c.Algorithms)
	for _, a := range c.Algorithms {
		if !slices.Contains(allowedAlgorithms, a) {
			return c, fmt.Errorf("issuer %q: algorithm %q is not allowed (only %s)", c.URL, a, strings.Join(allowedAlgorithms, ", "))
		}
	}
	if c.PrincipalClaim == "" {
		c.PrincipalClaim = DefaultPrincipalClaim
	}
	switch {
	case c.Leeway < 0 || c.Leeway > MaxLeeway:
		return c, fmt.Errorf("issuer %q: leeway must be between 0 and %s", c.URL, MaxLeeway)
	case c.Leeway == 0:
		c.Leeway = DefaultLeeway
	}
	switch {
	case c.MaxLifetime < 0 || c.MaxLifetime > MostMaxLifetime:
		return c, fmt.Errorf("issuer %q: max lifetime must be between 0 and %s", c.URL, MostMaxLifetime)
	case c.MaxLifetime == 0:
		c.MaxLifetime = DefaultMaxLifetime
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.MinRefreshInterval <= 0 {
		c.MinRefreshInterval = DefaultMinRefreshInterval
	}
	if c.MaxKeyAge <= 0 {
		c.MaxKeyAge = DefaultMaxKeyAge
	}
	if c.MaxKeyAge < c.RefreshInterval {
		return c, fmt.Errorf("issuer %q: max key age %s is shorter than the refresh interval %s", c.URL, c.MaxKeyAge, c.RefreshInterval)
	}
	return c, nil
}

// fetchable reports whether keys may be read from u: over HTTPS, or over
// plain HTTP only from this host (a loopback address or localhost). A key
// set read in plain text over the network lets whoever is on the path sign
// any principal.
func fetchable(u *url.URL) bool {
	if u == nil || u.Host == "" {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		h := u.Hostname()
		if strings.EqualFold(h, "localhost") {
			return true
		}
		ip, err := netip.ParseAddr(h)
		return err == nil && ip.Unmap().IsLoopback()
	}
	return false
}

// keyClient is c refusing a redirect to a URL keys may not be read from
// (HTTPS to plain HTTP, say); otherwise it redirects as c does.
func keyClient(c *http.Client) *http.Client {
	kc := *c
	next := c.CheckRedirect
	kc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if !fetchable(req.URL) {
			return fmt.Errorf("redirected to %s://%s, which is not HTTPS", req.URL.Scheme, req.URL.Host)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &kc
}

func newIssuer(in Issuer, o *OIDCOptions) (*issuer, error) {
	c, err := CheckIssuer(in)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	is := &issuer{cfg: c, log: o.Logger, attrs: slices.Sorted(maps.Keys(c.AttributeClaims))}
	for _, a := range c.Algorithms {
		is.algs = append(is.algs, jose.SignatureAlgorithm(a))
	}
	is.keys = &keySet{issuer: c.URL, jwksURL: c.JWKSURL, client: o.HTTPClient, minRefresh: c.MinRefreshInterval,
		maxAge: c.MaxKeyAge, now: o.Now, log: o.Logger}
	return is, nil
}

// Run fetches every issuer's keys now and then every RefreshInterval,
// until ctx ends. A failed fetch is logged and keeps the cached keys. The
// interval runs from the start of a fetch, so a slow provider does not
// stretch it.
func (m *OIDC) Run(ctx context.Context) {
	next := map[*issuer]time.Time{}
	for _, is := range m.issuers {
		next[is] = m.now().Add(is.cfg.RefreshInterval)
		_ = is.keys.refresh(ctx, true)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for is, at := range next {
			if !m.now().Before(at) {
				next[is] = m.now().Add(is.cfg.RefreshInterval)
				_ = is.keys.refresh(ctx, true)
			}
		}
	}
}

// AuthenticateCredential implements pigeon.CredentialAuthenticator.
func (m *OIDC) AuthenticateCredential(ctx context.Context, c pigeon.Credential) (*pigeon.Principal, error) {
	is := m.issuerOf(c.Bearer)
	if is == nil {
		return nil, pigeon.ErrUnrecognized
	}
	return is.verify(ctx, c.Bearer, m.now())
}

// issuerOf returns the configured issuer a token claims (unverified), or nil.
// It reads iss as verify does, with go-jose's decoder: member names case
// sensitive, a duplicate member refused (verify refuses one nested
// deeper). Read by another decoder (encoding/json takes the last of
// duplicate members and matches names without case), a payload holding
// "iss" twice, or "iss" and "ISS", would be judged as one issuer's and
// its claims read as naming another.
func (m *OIDC) issuerOf(tok string) *issuer {
	if len(tok) > maxTokenBytes || strings.Count(tok, ".") != 2 {
		return nil
	}
	_, rest, _ := strings.Cut(tok, ".")
	payload, _, _ := strings.Cut(rest, ".")
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil
	}
	var c struct {
		Iss any `json:"iss"`
	}
	if josejson.Unmarshal(b, &c) != nil {
		return nil
	}
	s, _ := c.Iss.(string)
	return m.issuers[s]
}

func refuse(format string, args ...any) *pigeon.Error {
	return pigeon.NewError(pigeon.CodeUnauthenticated, "bearer token refused: "+format, args...)
}

// verify checks the signature, then the claims, then derives the principal.
func (is *issuer) verify(ctx context.Context, raw string, now time.Time) (*pigeon.Principal, error) {
	tok, err := jwt.ParseSigned(raw, is.algs)
	if err != nil {
		return nil, refuse("malformed, or signed with an algorithm this issuer is not allowed")
	}
	if len(tok.Headers) != 1 {
		return nil, refuse("not exactly one signature")
	}
	h := tok.Headers[0]
	if !credentialType(h.ExtraHeaders[jose.HeaderType]) {
		return nil, refuse("its typ is not an access or ID token's")
	}
	key, err := is.keys.key(ctx, h.KeyID, h.Algorithm)
	if err != nil {
		return nil, err
	}
	if key.Algorithm != "" && key.Algorithm != h.Algorithm {
		return nil, refuse("the key is for %s, the token says %s", key.Algorithm, h.Algorithm)
	}
	if !keyFits(key.Key, h.Algorithm) {
		return nil, refuse("the key type does not fit algorithm %s", h.Algorithm)
	}
	var std jwt.Claims
	var payload json.RawMessage
	if err := tok.Claims(key.Key, &std, &payload); err != nil {
		return nil, refuse("the signature does not verify")
	}
	all, err := claimsOf(payload)
	if err != nil {
		return nil, refuse("the claims are not a JSON object")
	}
	if std.Expiry == nil {
		return nil, refuse("no exp claim")
	}
	if _, ok := all["events"]; ok {
		// A security event token (RFC 8417), such as a back-channel
		// logout token, typed JWT or not typed at all.
		return nil, refuse("a security event token is no credential")
	}
	err = std.ValidateWithLeeway(jwt.Expected{Issuer: is.cfg.URL, AnyAudience: is.cfg.Audiences, Time: now}, is.cfg.Leeway)
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrExpired):
		return nil, refuse("expired")
	case errors.Is(err, jwt.ErrNotValidYet):
		return nil, refuse("not valid yet (nbf)")
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return nil, refuse("issued in the future (iat)")
	case errors.Is(err, jwt.ErrInvalidAudience):
		return nil, refuse("not for this audience")
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return nil, refuse("wrong issuer")
	default:
		return nil, refuse("invalid claims")
	}
	if exp, most := std.Expiry.Time(), is.cfg.MaxLifetime+is.cfg.Leeway; exp.Sub(now) > most ||
		std.IssuedAt != nil && exp.Sub(std.IssuedAt.Time()) > most {
		return nil, refuse("lives longer than the issuer's max lifetime %s (exp - iat, or exp - now)", is.cfg.MaxLifetime)
	}
	if len(is.cfg.Clients) > 0 && !slices.Contains(is.cfg.Clients, client(all)) {
		return nil, refuse("not issued to a client this broker accepts (azp, client_id)")
	}
	p, err := is.principal(all)
	if err != nil {
		return nil, err
	}
	// The token is accepted until exp plus the leeway (ValidateWithLeeway
	// refuses it after), and so is what it admitted: the contracts it
	// negotiates expire then at the latest.
	p.Expires = std.Expiry.Time().Add(is.cfg.Leeway)
	return p, nil
}

// credentialType reports whether typ, a token's typ header, is absent or
// names an access token (RFC 9068) or a plain JWT, as ID tokens are: the
// issuer's keys also sign tokens for other uses (logout, security events,
// proofs), which carry sub and aud too and must not sign anyone in.
// Media types compare without case, "application/" optional (RFC 7515).
func credentialType(typ any) bool {
	if typ == nil {
		return true
	}
	s, ok := typ.(string)
	if !ok {
		return false
	}
	s = strings.ToLower(s)
	s = strings.TrimPrefix(s, "application/")
	return s == "jwt" || s == "at+jwt"
}

// keyFits reports whether key is of the type alg signs with.
func keyFits(key any, alg string) bool {
	switch pk := key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return pk.Curve == elliptic.P256()
		case "ES384":
			return pk.Curve == elliptic.P384()
		case "ES512":
			return pk.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// principal derives the principal from verified claims.
func (is *issuer) principal(claims map[string]any) (*pigeon.Principal, error) {
	id, ok := claim(claims, is.cfg.PrincipalClaim).(string)
	if !ok || id == "" || len(id) > 1024 {
		return nil, refuse("the principal claim %q is missing or not a string", is.cfg.PrincipalClaim)
	}
	if strings.ContainsFunc(id, notNameRune) {
		return nil, refuse("the principal claim %q holds a control or formatting character or U+FFFD", is.cfg.PrincipalClaim)
	}
	if !checkedClaim(claims, is.cfg.PrincipalClaim) {
		return nil, refuse("the principal claim %q is not verified by the issuer (%s is not true)", is.cfg.PrincipalClaim, verifiedBy[is.cfg.PrincipalClaim])
	}
	id = is.cfg.PrincipalPrefix + id
	for _, p := range is.shadows {
		// Distinct prefixes keep issuers apart only when neither starts
		// the other: beside "partner:", an issuer of no prefix whose
		// subject is "partner:alice" would be the partner's alice.
		if strings.HasPrefix(id, p) {
			return nil, refuse("the principal claim %q starts with the principal prefix of another issuer", is.cfg.PrincipalClaim)
		}
	}
	if err := is.mayAssert(id); err != nil {
		return nil, refuse("the principal claim %q %s", is.cfg.PrincipalClaim, err)
	}
	p := &pigeon.Principal{ID: id, Method: pigeon.AuthOIDC}
	if is.cfg.RolesClaim != "" {
		roles, err := rolesOf(claim(claims, is.cfg.RolesClaim))
		if err != nil {
			return nil, refuse("the roles claim %q %s", is.cfg.RolesClaim, err)
		}
		// A role that is not a role name is dropped, the rest of the
		// token standing: a provider may carry roles of other
		// applications that no role of the broker could be named
		// (pigeon.Engine.PutRole refuses such a name), and they would
		// only ever match nothing. They are not kept: a principal's
		// roles reach audit records, logs and policy conditions, which
		// take role names to be names.
		bad := 0
		p.Roles = slices.DeleteFunc(roles, func(r string) bool {
			if !roleName(r) {
				bad++
				return true
			}
			return !is.mayGive(r)
		})
		if bad > 0 {
			is.roleNamesDropped(id, bad)
		}
		if len(p.Roles) == 0 {
			p.Roles = nil
		}
	}
	for _, attr := range is.attrs {
		name := is.cfg.AttributeClaims[attr]
		if v, ok := scalar(claim(claims, name)); ok && checkedClaim(claims, name) {
			if err := attributeValue(v); err != nil {
				return nil, refuse("the claim %q of attribute %q %s", name, attr, err)
			}
			if p.Attributes == nil {
				p.Attributes = map[string]string{}
			}
			p.Attributes[attr] = v
		}
	}
	return p, nil
}

// checkAttributeClaims checks an issuer's AttributeClaims against the
// directory's bounds on an account's attributes (pigeon.Engine.CreateAccount):
// at most pigeon.MaxAccountAttributes, every attribute name 1 to
// pigeon.MaxAttributeNameLength bytes of UTF-8 without a control
// character, and every claim named.
func checkAttributeClaims(attrs map[string]string) error {
	if len(attrs) > pigeon.MaxAccountAttributes {
		return fmt.Errorf("%d attribute claims, more than an account's %d attributes", len(attrs), pigeon.MaxAccountAttributes)
	}
	for _, a := range slices.Sorted(maps.Keys(attrs)) {
		switch {
		case a == "":
			return errors.New("an attribute name is empty")
		case len(a) > pigeon.MaxAttributeNameLength:
			// The name is not quoted: it is the long thing refused.
			return fmt.Errorf("an attribute name is %d bytes, more than %d", len(a), pigeon.MaxAttributeNameLength)
		case !utf8.ValidString(a) || strings.ContainsFunc(a, notTextRune):
			return fmt.Errorf("the attribute name %q is not UTF-8 or holds a control character", a)
		case attrs[a] == "":
			return fmt.Errorf("the attribute %q names no claim", a)
		}
	}
	return nil
}

// attributeValue checks the value of an attribute claim as the directory
// checks an account's (pigeon.Engine.CreateAccount): at most
// pigeon.MaxAttributeValueLength bytes, without a control character (C0,
// tab and newline included, DEL, C1, and the formatting characters of
// notTextRune), so that no policy condition,
// contract, audit record, log or console line carries more, or is driven
// by ESC, CSI or CR through it. The claims are valid UTF-8 (the JSON
// decoder makes U+FFFD of anything else). The error does not quote the
// value.
//
// A token with such a value is refused rather than the attribute dropped:
// dropped, it would read as a token without the attribute, which a rule
// that tests for its presence ("suspended" in principal.attributes, in a
// deny rule) takes for a principal it lets through, and the attribute of
// the same name of the principal's account would stand in for the
// token's. Refusing costs only the bearer of the token: a user who put a
// newline in a claim they set (a name) cannot sign in until they take it
// out.
func attributeValue(v string) error {
	if len(v) > pigeon.MaxAttributeValueLength {
		return fmt.Errorf("is %d bytes, longer than %d", len(v), pigeon.MaxAttributeValueLength)
	}
	if strings.ContainsFunc(v, notTextRune) {
		return errors.New("holds a control character")
	}
	return nil
}

// notTextRune reports a rune the broker takes for a control character in
// a name or a text it keeps: its one rule (pigeon.IsControlRune), a
// control character as unicode.IsControl reads one (C0, DEL, C1), or a
// formatting character that reorders the text around it or breaks its
// line (U+061C, U+200E, U+200F, U+2028 to U+202E, U+2066 to U+2069).
// TestAttributeValueBoundsAreTheEngines holds the attribute checks to
// the engine's.
func notTextRune(r rune) bool { return pigeon.IsControlRune(r) }

// verifiedBy maps the claims of OpenID Connect that a user may set to
// what the provider has not checked (a sign-up form, a profile page, the
// admin of another tenant) to the claim that says whether it checked them.
var verifiedBy = map[string]string{"email": "email_verified", "phone_number": "phone_number_verified"}

// checkedClaim reports whether claim name may be taken as the provider's word:
// any claim but those of verifiedBy, and those when their twin is true
// (JSON true, or the string "true" that some providers send). Without the
// twin, a user who gave someone else's address, unverified, would be
// that address's principal, or meet a policy condition on it.
func checkedClaim(claims map[string]any, name string) bool {
	twin, ok := verifiedBy[name]
	if !ok {
		return true
	}
	switch v := claims[twin].(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// rolePrograms is server.RolePrograms (package server imports more than
// identity may): the role of the program routes, which deploy code that
// runs as the caller's account.
const rolePrograms = "programs"

// roleNamesDropped logs that n roles of principal id's token were
// dropped for not being role names, once a minute at most: a provider
// that puts such a role in every token would otherwise log every request.
func (is *issuer) roleNamesDropped(id string, n int) {
	if now := time.Now().UnixNano(); now-is.droppedWarned.Load() >= int64(time.Minute) {
		is.droppedWarned.Store(now)
		is.log.Warn("identity: roles dropped from a token (logged once a minute at most)", "reason", errRoleName.Error(),
			"issuer", is.cfg.URL, "claim", is.cfg.RolesClaim, "principal", id, "dropped", n)
	}
}

// errRoleName is the reason the log line gives for roles dropped from a
// token's roles claim.
var errRoleName = fmt.Errorf("not a role name (1 to %d bytes of letters, digits and . _ - : @ /)", pigeon.MaxIDLength)

// roleName reports whether r is a role name as pigeon.Engine.PutRole and
// AddAccountRole take one: 1 to pigeon.MaxIDLength bytes of ASCII letters,
// digits and '.', '_', '-', ':', '@', '/', no '/'-separated segment "."
// or "..".
func roleName(r string) bool {
	if r == "" || len(r) > pigeon.MaxIDLength {
		return false
	}
	for i := 0; i < len(r); i++ {
		switch c := r[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '-', c == ':', c == '@', c == '/':
		default:
			return false
		}
	}
	for seg := range strings.SplitSeq(r, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// mayGive reports whether the issuer may give its principals role
// (Issuer.Roles): without the list, any role but the broker's own.
func (is *issuer) mayGive(role string) bool {
	if len(is.cfg.Roles) > 0 {
		return slices.Contains(is.cfg.Roles, role)
	}
	return role != pigeon.RoleAdmin && role != pigeon.RoleAuditor && role != rolePrograms && role != pigeon.RoleBridge
}

// mayAssert refuses a principal that is, or looks like, a SPIFFE ID
// unless it is a valid one, with a path, of a trust domain the issuer is
// configured for (Issuer.TrustDomains).
func (is *issuer) mayAssert(id string) error {
	if len(id) < len("spiffe:") || !strings.EqualFold(id[:len("spiffe:")], "spiffe:") {
		return nil
	}
	sid, err := spiffeid.FromString(id)
	switch {
	case err != nil || sid.Path() == "":
		return errors.New("is not a SPIFFE ID of a workload")
	case !slices.Contains(is.cfg.TrustDomains, sid.TrustDomain().Name()):
		return errors.New("names a SPIFFE trust domain this issuer is not configured for")
	}
	return nil
}

// notNameRune reports a rune no principal may hold: one of the broker's
// rule for every name (notTextRune, pigeon.IsControlRune), and U+FFFD.
// A control character (NUL, a newline) is no part of a name, and NUL
// separates the parts of the broker's keys; a formatting character that
// reorders the text (U+202E) would show the principal, in every audit
// record and listing, as another one, and the engine refuses such a
// principal id anyway. U+FFFD is what the JSON decoder makes of a byte
// that is not UTF-8 and of an escaped lone surrogate, so subjects the
// identity provider tells apart ("a\xff", "a\ud800", "a\ufffd") would
// be one principal.
func notNameRune(r rune) bool { return r == utf8.RuneError || pigeon.IsControlRune(r) }

// claim follows a dotted path into nested objects; a name that is itself
// a claim wins over the path.
func claim(claims map[string]any, name string) any {
	if v, ok := claims[name]; ok {
		return v
	}
	var cur any = claims
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

const maxRoles = 256

func rolesOf(v any) ([]string, error) {
	var roles []string
	switch r := v.(type) {
	case nil:
		return nil, nil
	case string:
		roles = strings.Fields(r)
	case []any:
		for _, x := range r {
			s, ok := x.(string)
			if !ok {
				return nil, errors.New("holds a value that is not a string")
			}
			roles = append(roles, s)
		}
	default:
		return nil, errors.New("is neither a string nor an array of strings")
	}
	if len(roles) > maxRoles {
		return nil, fmt.Errorf("holds more than %d roles", maxRoles)
	}
	slices.Sort(roles)
	return slices.Compact(roles), nil
}

// claimsOf decodes a verified payload as go-jose does (member names case
// sensitive, a duplicate member refused), numbers as their literals: a
// float64 holds integers exactly only up to 2^53, and ids beyond it that
// the provider tells apart would become one attribute value.
func claimsOf(payload []byte) (map[string]any, error) {
	d := josejson.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var all map[string]any
	if err := d.Decode(&all); err != nil {
		return nil, err
	}
	if all == nil {
		return nil, errors.New("not an object")
	}
	return all, nil
}

// scalar renders a string, number or boolean claim.
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case josejson.Number:
		return number(string(x))
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// maxExactFloat is 2^53: from it on, a float64 no longer tells every
// integer from the next.
const maxExactFloat = 1 << 53

// number renders the JSON number literal s: an integer digit for digit
// (-0 as 0), any other number as the shortest decimal of its float64,
// unless its value is 2^53 or more in magnitude, where the float64 may
// not be the number written ("9007199254740993.0", "1e21"): such a
// number renders nothing.
func number(s string) (string, bool) {
	digits := strings.TrimPrefix(s, "-")
	if digits != "" && strings.Trim(digits, "0123456789") == "" {
		if strings.Trim(digits, "0") == "" {
			return "0", true
		}
		return s, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.Abs(f) >= maxExactFloat {
		return "", false
	}
	return strconv.FormatFloat(f, 'f', -1, 64), true
}
