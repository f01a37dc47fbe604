package pigeon

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"time"

	"pigeon/internal/grant"
	"pigeon/store"
)

// Limits of grant tokens.
const (
	DefaultGrantTTL = time.Hour
	MaxGrantTTL     = 30 * 24 * time.Hour
)

// GrantToken is an issued grant: a signed JWT (EdDSA) that the broker
// accepts as a credential for Account with the given roles.
type GrantToken struct {
	Token     string    `json:"token"`
	JTI       string    `json:"jti"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// grantRecord is what the broker keeps of an issued grant.
type grantRecord struct {
	JTI       string    `json:"jti"`
	Account   string    `json:"account"`
	Roles     []string  `json:"roles"`
	IssuedAt  time.Time `json:"issuedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// AccountCreatedAt is when the account the grant was issued to was
	// created: an account deleted and created again under the same id is
	// another account, which its predecessor's grants are nothing to.
	AccountCreatedAt time.Time `json:"accountCreatedAt,omitzero"`
}

// of reports whether g was issued to a itself, not to an earlier account
// of a's id that was deleted since. A record written before
// AccountCreatedAt was kept is of a when it was issued after a was created.
func (g *grantRecord) of(a *Account) bool {
	if !g.AccountCreatedAt.IsZero() {
		return g.AccountCreatedAt.Equal(a.CreatedAt)
	}
	return !g.IssuedAt.Before(a.CreatedAt.Truncate(time.Second))
}

// loadGrantKey reads (or creates and stores) the broker's grant signing key.
func (e *Engine) loadGrantKey(ctx context.Context) error {
	b, err := e.store.Get(ctx, bucketBroker, "grant-key")
	switch {
	case err == nil && len(b) == ed25519.PrivateKeySize:
		e.grantKey = ed25519.PrivateKey(b)
		return nil
	case err == nil:
		return NewError(CodeStoreCorrupt, "the stored grant signing key is malformed")
	case !errors.Is(err, store.ErrNotFound):
		return storeError(err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return WrapError(CodeInternal, err, "generate grant key")
	}
	if c, ok := e.store.(store.KVCreator); ok {
		// Brokers sharing the store may be starting at once: the first
		// key created is every broker's, or each would sign and accept
		// its own tokens only.
		switch err := c.Create(ctx, bucketBroker, "grant-key", priv); {
		case errors.Is(err, store.ErrExists):
			return e.loadGrantKey(ctx)
		case err != nil:
			return storeError(err)
		}
	} else if err := e.store.Put(ctx, bucketBroker, "grant-key", priv); err != nil {
		return storeError(err)
	}
	e.grantKey = priv
	return nil
}

// IssueGrant signs a grant token for account with roles, valid for ttl
// (0: 1 h; at most 30 days; a negative or longer ttl is INVALID_ARGUMENT).
// A token's expiry is in whole seconds, so ttl is too: a fraction of a
// second is dropped, and a ttl under a second, whose token would be born
// expired, is INVALID_ARGUMENT. Roles whose token would be over the size
// a grant token may have (grant.MaxPayloadLen), or more than
// MaxPrincipalRoles of them (the most a principal carries), are
// INVALID_ARGUMENT. The grant carries those of roles that the account
// holds when it is issued (the token's roles claim is what was asked for;
// it grants nothing by itself), less each role taken from the account
// since (RemoveAccountRole): the roles in effect at every later check are those
// of the grant that the account still holds then, and a role the account
// is given after the grant was issued, or given back, is not among them.
// An account that holds Options.MaxGrantsPerAccount live grants (neither
// expired nor revoked) gets no more: INVALID_ARGUMENT, with nothing
// written or audited, until one is revoked or expires.
func (e *Engine) IssueGrant(ctx context.Context, account string, roles []string, ttl time.Duration) (GrantToken, error) {
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		return GrantToken{}, errShutdown()
	}
	defer e.ops.leave()
	if err := e.auditGuard(ctx); err != nil {
		return GrantToken{}, err
	}
	if e.grantKey == nil {
		return GrantToken{}, WrapError(CodeInternal, errNoGrantKey, "grants are unavailable")
	}
	// An account created on another node a moment ago, which this node
	// has not heard of, is looked for in the store (accountFor).
	acct, err := e.dir.accountFor(ctx, account)
	if err != nil {
		return GrantToken{}, err
	}
	if len(roles) == 0 {
		return GrantToken{}, NewError(CodeBadRequest, "a grant needs at least one role")
	}
	if err := validIDs("a role name", roles); err != nil {
		return GrantToken{}, err
	}
	if n := len(uniqueSorted(roles)); n > MaxPrincipalRoles {
		// Its principal would carry them: authentication would refuse it.
		return GrantToken{}, NewError(CodeInvalidArgument, "a grant carries at most %d roles, not %d", MaxPrincipalRoles, n)
	}
	switch {
	case ttl < 0:
		return GrantToken{}, NewError(CodeInvalidArgument, "a grant ttl must not be negative")
	case ttl == 0:
		ttl = DefaultGrantTTL
	case ttl > MaxGrantTTL:
		return GrantToken{}, NewError(CodeInvalidArgument, "a grant lives at most %s", MaxGrantTTL)
	case ttl < time.Second:
		// The token's exp is in whole seconds: it would be expired at once.
		return GrantToken{}, NewError(CodeInvalidArgument, "a grant lives at least 1s")
	}
	// The token's exp and the record's expiry are the same instant.
	ttl = ttl.Truncate(time.Second)
	var jb [16]byte
	_, _ = rand.Read(jb[:])
	now := e.now().UTC().Truncate(time.Second)
	rec := grantRecord{JTI: "gr_" + hex.EncodeToString(jb[:]), Account: account, Roles: uniqueSorted(roles), IssuedAt: now, ExpiresAt: now.Add(ttl), AccountCreatedAt: acct.CreatedAt}
	tok, err := grant.Sign(e.grantKey, grant.Claims{Subject: account, ID: rec.JTI, Roles: rec.Roles, IssuedAt: now, ExpiresAt: rec.ExpiresAt})
	if errors.Is(err, grant.ErrTooLarge) {
		return GrantToken{}, NewError(CodeInvalidArgument, "the grant's roles do not fit in a grant token (%d characters of claims at most)", grant.MaxPayloadLen)
	}
	if err != nil {
		return GrantToken{}, WrapError(CodeInternal, err, "sign grant")
	}
	// The records are queued under the directory's lock, so a grant's
	// issue and its revocation are recorded in the order they were made.
	written := noWait
	if err := e.dir.addGrant(ctx, &rec, func() {
		written = e.auditInOrder(EventGrantIssued.record("", CodeOK, store.AuditRecord{Principal: account, Ref: rec.JTI}))
	}); err != nil {
		return GrantToken{}, err
	}
	if err := written(); err != nil {
		_ = e.revokeGrant(ctx, rec.JTI) // no grant without its evidence, whether or not Shutdown began
		return GrantToken{}, err
	}
	return GrantToken{Token: tok, JTI: rec.JTI, ExpiresAt: rec.ExpiresAt}, nil
}

// RevokeGrant revokes a grant: the token is refused from now on, and every
// contract negotiated with it fails its next check with GRANT_REVOKED (on
// every live node of a cluster: see ClusterBarrier). It takes access
// away only: it goes on once Shutdown began, while the store is open (see
// Engine.Shutdown).
func (e *Engine) RevokeGrant(ctx context.Context, jti string) error {
	leave, err := e.enterRevocation() // Shutdown waits for its record (inflight.go)
	if err != nil {
		return err
	}
	defer leave()
	return e.revokeGrant(ctx, jti)
}

// revokeGrant is RevokeGrant, within an operation in flight.
func (e *Engine) revokeGrant(ctx context.Context, jti string) error {
	written := noWait
	_, err := e.dir.revokeGrant(ctx, jti, func(account string) {
		written = e.auditInOrder(EventGrantRevoked.record(OutcomeDeny, CodeGrantRevoked, store.AuditRecord{Principal: account, Ref: jti}))
	})
	if err != nil {
		return err
	}
	written()
	e.onAccessChanged()
	return e.clusterBarrier(ctx)
}

// authenticateGrant verifies a grant token: EdDSA signed by this broker,
// issued by it, not expired, not revoked, for an account that exists. Any
// other algorithm (none, HS256, RS256) is refused before the signature is
// looked at. The principal it yields is held to checkPrincipal's bounds
// (UNAUTHENTICATED otherwise), whether the engine verifies the token
// itself or a CredentialAuthenticator does through GrantTokens.
func (e *Engine) authenticateGrant(tok string) (*Principal, error) {
	if e.grantKey == nil {
		return nil, NewError(CodeUnauthenticated, "unknown or missing credential")
	}
	claims, err := grant.Verify(tok, e.grantKey.Public().(ed25519.PublicKey), e.now)
	if err != nil {
		return nil, NewError(CodeUnauthenticated, "invalid grant token")
	}
	roles, code := e.dir.effectiveRoles(claims.Subject, nil, claims.ID, e.now())
	if code == CodeStoreUnavailable {
		return nil, errBehind() // the token may be good: not refused as one that is not
	}
	if code != CodeOK {
		return nil, NewError(CodeUnauthenticated, "the grant was revoked or has expired")
	}
	var attrs map[string]string
	var created time.Time
	if a := e.dir.lookup(claims.Subject); a != nil {
		attrs, created = maps.Clone(a.Attributes), a.CreatedAt
	}
	p := &Principal{ID: claims.Subject, Attributes: attrs, Roles: roles, Method: AuthGrant, Expires: claims.ExpiresAt, grantID: claims.ID, account: created, resolved: true}
	// The principal is held to the bounds of any authenticator's, however
	// the grant came to be authenticated: the grant's record and its
	// account are read from a store, where an earlier broker or another
	// writer may have left what IssueGrant would refuse now.
	if err := checkPrincipal(p); err != nil {
		return nil, err
	}
	return p, nil
}
