package pigeon

import (
	"context"
	"errors"
	"unicode/utf8"

	"pigeon/internal/grant"
	"pigeon/store"
)

// Authenticate resolves a credential to a principal.
func (e *Engine) Authenticate(ctx context.Context, credential string) (*Principal, error) {
	return e.AuthenticateCredential(ctx, Credential{Bearer: credential})
}

// AuthenticateCredential resolves c to a principal. With an
// Options.Authenticator that is a CredentialAuthenticator (a chain of
// methods, say) every credential goes to it; otherwise a JWT is verified as
// a grant token of this broker and any other bearer string goes to the
// Authenticator, and a client certificate is ignored. A principal that is
// not a grant's is merged with its account (roles united, attributes
// overlaid), and its Method defaults to AuthToken. Every refusal is an
// *Error: UNAUTHENTICATED unless the authenticator chose another code.
//
// Every refusal but SHUTTING_DOWN writes an auth.failed audit record
// naming the method tried and the source of c.RemoteAddr (its IPv4
// address, or its IPv6 /64 prefix: "2001:db8:1:2::/64", the source as the
// lockout counts it, and the site when its count locked the source out),
// never the credential; a run from one source is coalesced. A source that had Options.AuthFailureLimit credentials
// refused within Options.AuthFailureWindow is refused RATE_LIMITED, with
// details.retryAfterMs, before c is looked at.
func (e *Engine) AuthenticateCredential(ctx context.Context, c Credential) (*Principal, error) {
	if !e.ops.enter() { // Shutdown waits for its auth.failed record (inflight.go)
		return nil, errShutdown()
	}
	defer e.ops.leave()
	src := SourceOf(c.RemoteAddr)
	if left, site := e.authGuard.lockedBy(src, e.now()); left > 0 {
		err := &Error{Code: CodeRateLimited, Message: "too many failed authentications from this address; try again later",
			Details: map[string]any{"retryAfterMs": left.Milliseconds()}}
		e.auditAuthFailure(ctx, c, src, site, CodeRateLimited)
		return nil, err
	}
	p, err := e.authenticateCredential(ctx, c)
	if err != nil && ErrorCode(err) != CodeShutdown {
		code := ErrorCode(err)
		e.note(NoteAuthFailure, credentialMethod(c))
		if credentialRefused(code) {
			e.authGuard.failed(src, e.now())
		}
		e.auditAuthFailure(ctx, c, src, Source{}, code)
	}
	return p, err
}

// Reauthenticate resolves c again, a credential AuthenticateCredential
// accepted when a long-lived exchange began (a stream of events, say), and
// returns the principal it stands for now: its roles as they are now, or
// the refusal it would get now (a grant revoked or expired, a role taken
// away from its account, a token no longer configured). A refusal is not
// counted against the source's lockout nor audited as auth.failed: it ends
// an exchange already admitted, and is no attempt. A server calls it
// before each part of such an exchange, so that a revocation takes effect
// at once rather than when the exchange ends.
func (e *Engine) Reauthenticate(ctx context.Context, c Credential) (*Principal, error) {
	if e.closed.Load() {
		return nil, errShutdown()
	}
	return e.authenticateCredential(ctx, c)
}

// credentialRefused reports whether an authentication failure of code
// judged the credential (and counts against its source), rather than
// failing for the broker's or an identity provider's want.
func credentialRefused(code Code) bool {
	switch code {
	case CodeUnauthenticated, CodeGrantRevoked, CodeForbidden:
		return true
	}
	return false
}

// auditAuthFailure writes the auth.failed record of a refused credential:
// its method and source as ref, never the credential, and the site whose
// count locked the source out, when one did (site valid): "auth:bearer
// from 2001:db8:1:2::/64 (site 2001:db8:1::/48 locked out)".
func (e *Engine) auditAuthFailure(ctx context.Context, c Credential, src, site Source, code Code) {
	ref := "auth:" + credentialMethod(c)
	switch {
	case src.IsValid():
		ref += " from " + src.String()
	case c.RemoteAddr != "":
		ref += " from " + c.RemoteAddr
	}
	if site.IsValid() {
		ref += " (site " + site.String() + " locked out)"
	}
	_ = e.audit(ctx, EventAuthFailed.record(OutcomeDeny, code, store.AuditRecord{Ref: ref}))
}

// authenticateCredential resolves c. A panic of the authenticator (the
// application's code, or an identity provider's, run on what a client
// presented) refuses c as an unknown credential is refused, with the same
// error, so that a client learns nothing more from it; the callers count
// and audit it as such. Unrecovered, it reached net/http, which logged
// its value whole and cut the connection, or the in-process caller,
// uncounted. It is logged without its value (authPanicText).
func (e *Engine) authenticateCredential(ctx context.Context, c Credential) (p *Principal, err error) {
	if e.closed.Load() {
		return nil, errShutdown()
	}
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, errUnknownCredential()
			e.panicked(PanicAuthenticator, "the authenticator panicked: the credential is refused as unknown",
				authPanicText(r), "method", credentialMethod(c))
		}
	}()
	if ca, ok := e.auth.(CredentialAuthenticator); ok {
		p, err = ca.AuthenticateCredential(context.WithValue(ctx, engineKey{}, e), c)
	} else if grant.LooksLikeJWT(c.Bearer) {
		return e.authenticateGrant(c.Bearer)
	} else {
		p, err = e.auth.Authenticate(ctx, c.Bearer)
	}
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, WrapError(CodeUnauthenticated, err, "unknown or missing credential")
	}
	if p == nil || p.ID == "" {
		return nil, errUnknownCredential()
	}
	if err := checkPrincipal(p); err != nil {
		return nil, err
	}
	if p.grantID != "" {
		return p, nil
	}
	return e.resolvePrincipal(p)
}

// principalText reports whether id is text: valid UTF-8 without control
// or formatting characters (hasControl).
func principalText(id string) bool {
	return utf8.ValidString(id) && !hasControl(id)
}

// MaxPrincipalIDLength is the longest principal id the engine takes from
// an authenticator, in bytes: the longest SPIFFE ID (2048 bytes, the
// SPIFFE specification's bound, which a client certificate's may reach),
// and above the longest an OIDC issuer gives (a 1024-byte claim behind a
// principal prefix of at most 256 bytes) and an account id (MaxIDLength).
const MaxPrincipalIDLength = 2048

// MaxPrincipalRoles is the most roles the engine takes from an
// authenticator for one principal. Each is a role name (the syntax of
// Engine.PutRole), as the directory's roles are named.
const MaxPrincipalRoles = 256

// checkPrincipal holds the principal an authenticator returned (any
// Authenticator, the application's own included) to the bounds the
// engine keeps on every principal, whoever vouched for it: an id of 1 to
// MaxPrincipalIDLength bytes of text (principalText), at most
// MaxPrincipalRoles roles, each a role name, and attributes within the
// bounds of an account's (validAttributes: at most
// MaxAccountAttributes, names and values bounded and text). A principal
// is copied into every contract, lease, audit record and policy
// condition it reaches, so one that breaks them is refused
// UNAUTHENTICATED, counted and audited as another refused credential,
// and nothing of it is kept. The error quotes neither the id nor an
// attribute's value (an attribute's name, quoted, it may). It runs once
// per authentication (a connection's, a request's), never per message.
func checkPrincipal(p *Principal) error {
	switch {
	case len(p.ID) > MaxPrincipalIDLength:
		return NewError(CodeUnauthenticated, "the authenticator returned a principal id of %d bytes, more than %d", len(p.ID), MaxPrincipalIDLength)
	case !principalText(p.ID):
		// Ids are text everywhere they are compared: in the directory, in
		// rules, as lease holders (a push subscription's are not text).
		return NewError(CodeUnauthenticated, "the authenticator returned a principal id that is not text")
	case len(p.Roles) > MaxPrincipalRoles:
		return NewError(CodeUnauthenticated, "the authenticator returned %d roles, more than %d", len(p.Roles), MaxPrincipalRoles)
	}
	for _, r := range p.Roles {
		if validID("a role name", r) != nil {
			// A role reaches contracts, audit records and conditions,
			// which take role names to be names.
			return NewError(CodeUnauthenticated, "the authenticator returned a role that is not a role name")
		}
	}
	if len(p.Attributes) == 0 {
		return nil
	}
	if err := validAttributes(p.Attributes); err != nil {
		// Not wrapped: the refusal is the credential's, not an invalid
		// argument of the caller's (errors.Is(err, ErrInvalid)).
		msg := err.Error()
		if pe := (*Error)(nil); errors.As(err, &pe) {
			msg = pe.Message
		}
		return NewError(CodeUnauthenticated, "the authenticator returned a principal whose attributes break an account's bounds: %s", msg)
	}
	return nil
}
