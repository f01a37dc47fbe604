package pigeon

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
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

// Validate checks t as configuration states it (pigeon serve checks every
// entry of its --tokens file with it, and refuses to start on an error):
// a token; a principal that is an account id (1 to MaxIDLength bytes of
// ASCII letters, digits and '.', '_', '-', ':', '@', '/', no '/'-separated
// segment "." or ".."), as the account whose roles and attributes the
// principal takes on is named; roles that are role names, by the same
// rule; and attributes within the directory's bounds on an account's
// (at most MaxAccountAttributes, names 1 to MaxAttributeNameLength bytes,
// values at most MaxAttributeValueLength bytes, both UTF-8 without a
// control or formatting character: hasControl), since they reach policy conditions, contracts,
// audit records and the console as an account's do. The error is
// INVALID_ARGUMENT and names the principal (quoted, its first 64 bytes),
// never the token.
//
// NewStaticTokens does not call it: it skips an entry without a token or
// a principal and takes the rest as given, and the engine refuses a
// principal id that is not UTF-8 or holds a control or formatting character when it
// authenticates it. An application that builds tokens from its own
// configuration calls Validate on each.
func (t StaticToken) Validate() error {
	shown := strconv.Quote(t.Principal[:min(len(t.Principal), 64)])
	if len(t.Principal) > 64 {
		shown += "…"
	}
	refuse := func(err error) error {
		var pe *Error
		if errors.As(err, &pe) {
			return NewError(CodeInvalidArgument, "the static token of principal %s: %s", shown, pe.Message)
		}
		return NewError(CodeInvalidArgument, "the static token of principal %s: %v", shown, err)
	}
	switch {
	case t.Principal == "":
		return NewError(CodeInvalidArgument, "a static token has no principal")
	case t.Token == "":
		return NewError(CodeInvalidArgument, "the static token of principal %s has no token", shown)
	}
	if err := validID("the principal", t.Principal); err != nil {
		return refuse(err)
	}
	if err := validIDs("a role name", t.Roles); err != nil {
		return refuse(err)
	}
	if err := validAttributes(t.Attributes); err != nil {
		return refuse(err)
	}
	return nil
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

// NewStaticTokens builds an authenticator from tokens (copied). An entry
// without a token or a principal is skipped; nothing else is checked
// (see StaticToken.Validate).
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
