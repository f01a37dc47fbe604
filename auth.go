package pigeon

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"
)

// Principal is an authenticated identity. The broker resolves it from a
// credential; nothing in a message body can change it.
type Principal struct {
	ID         string            `json:"id" yaml:"principal"`
	Attributes map[string]string `json:"attributes,omitempty" yaml:"attributes,omitempty"`
	Roles      []string          `json:"roles,omitempty" yaml:"roles,omitempty"`
	// Method is how the principal was authenticated; the engine sets
	// AuthToken when an Authenticator leaves it empty.
	Method AuthMethod `json:"method,omitempty" yaml:"-"`
	// Expires is the instant the credential that authenticated the
	// principal stops being valid: for package identity's methods the
	// token's exp plus its issuer's leeway (OIDC) or the earliest NotAfter
	// of the verified certificate chain (mTLS), and a grant token's
	// expiry. Zero: the credential does not expire (a static token). Every
	// contract the principal negotiates expires by then at the latest, and
	// from then on Negotiate refuses it UNAUTHENTICATED, so a connection
	// that authenticated once (a WebSocket session) acts on nothing after
	// its credential expired. An Authenticator sets it; the engine keeps
	// it when it merges the principal with its account.
	Expires time.Time `json:"-" yaml:"-"`

	baseRoles []string // roles the credential itself carries
	// baseAttrs are the attributes the credential itself carries; the
	// account's lie under them in Attributes.
	baseAttrs map[string]string
	// account is when the account whose roles and attributes the
	// principal carries was created; zero: it had none. An account
	// deleted and created again under its id is another account.
	account time.Time
	grantID string // the grant token's id, for a grant credential
	// resolved is set on a principal the engine authenticated
	// (resolveAccount, authenticateGrant): baseRoles, baseAttrs and
	// grantID then say what its credential carries. One built by hand carries its Roles.
	resolved bool
}

// expiredAt reports whether the principal's credential has expired at
// now.
func (p *Principal) expiredAt(now time.Time) bool {
	return !p.Expires.IsZero() && !now.Before(p.Expires)
}

// HasRole reports whether p holds role.
func (p *Principal) HasRole(role string) bool { return p != nil && slices.Contains(p.Roles, role) }

// Authenticator resolves a credential (a bearer token, say) to a principal.
// It returns an error matching ErrUnauthenticated for an unknown credential.
// Implementations must be safe for concurrent use.
type Authenticator interface {
	Authenticate(ctx context.Context, credential string) (*Principal, error)
}

// AuthenticatorFunc adapts a function to an Authenticator.
type AuthenticatorFunc func(ctx context.Context, credential string) (*Principal, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(ctx context.Context, credential string) (*Principal, error) {
	return f(ctx, credential)
}

// StaticToken binds one bearer token to a principal.
type StaticToken struct {
	Token      string            `json:"token" yaml:"token"`
	Principal  string            `json:"principal" yaml:"principal"`
	Attributes map[string]string `json:"attributes,omitempty" yaml:"attributes,omitempty"`
	Roles      []string          `json:"roles,omitempty" yaml:"roles,omitempty"`
}

// StaticTokens authenticates a fixed set of bearer tokens. It is immutable once built and safe for
// concurrent use. A token is looked up by its SHA-256 and then compared
// with crypto/subtle, so how long a refusal takes does not depend on how
// much of a known token a guess matched.
type StaticTokens struct {
	tokens []StaticToken
	byHash map[[sha256.Size]byte]staticEntry
}

// staticEntry is a known token and its principal.
type staticEntry struct {
	token []byte
	p     *Principal
}

// NewStaticTokens builds an authenticator from tokens (copied).
func NewStaticTokens(tokens ...StaticToken) *StaticTokens {
	s := &StaticTokens{byHash: make(map[[sha256.Size]byte]staticEntry, len(tokens))}
	for _, t := range tokens {
		if t.Token == "" || t.Principal == "" {
			continue
		}
		s.tokens = append(s.tokens, t)
		s.byHash[sha256.Sum256([]byte(t.Token))] = staticEntry{token: []byte(t.Token),
			p: &Principal{ID: t.Principal, Attributes: maps.Clone(t.Attributes), Roles: slices.Clone(t.Roles)}}
	}
	return s
}

// Authenticate implements Authenticator.
func (s *StaticTokens) Authenticate(_ context.Context, credential string) (*Principal, error) {
	// The map is keyed by the digest, whose bytes a guess cannot steer
	// toward a known token's; the final comparison takes the same time
	// wherever the two differ.
	if e, ok := s.byHash[sha256.Sum256([]byte(credential))]; ok && credential != "" &&
		subtle.ConstantTimeCompare(e.token, []byte(credential)) == 1 {
		return e.p, nil
	}
	return nil, NewError(CodeUnauthenticated, "unknown or missing credential")
}

// errUnknownCredential is the refusal of a credential the authenticator
// named no principal for, or panicked on.
func errUnknownCredential() error {
	return NewError(CodeUnauthenticated, "unknown or missing credential")
}

// authPanicText is what the log keeps of p, an authenticator's panic: a
// runtime error's own words (an index out of range, a nil dereference),
// which name no value, else p's type alone. A value the authenticator
// panicked with may quote the credential (a token, a claim, a
// certificate's subject), which no log keeps; the stack says where.
func authPanicText(p any) string {
	if re, ok := p.(runtime.Error); ok {
		return noPANIn(re.Error())
	}
	return fmt.Sprintf("a %T, not logged: it may quote the credential", p)
}
