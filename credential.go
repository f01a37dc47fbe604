package pigeon

import (
	"context"
	"crypto/x509"
	"errors"

	"pigeon/internal/grant"
)

// AuthMethod names how a principal was authenticated. It is recorded in
// the contracts the principal negotiates (ContractInfo.Auth) and in their
// contract.negotiated audit records (ref "auth:<method>").
type AuthMethod string

// Authentication methods of the broker and of package identity. An
// Authenticator of an embedder may name its own.
const (
	AuthToken AuthMethod = "token" // a static bearer token (StaticTokens), or any Authenticator that names none
	AuthGrant AuthMethod = "grant" // a grant token issued by this broker (IssueGrant)
	AuthMTLS  AuthMethod = "mtls"  // a TLS client certificate carrying a SPIFFE ID
	AuthOIDC  AuthMethod = "oidc"  // a JWT bearer token of an OpenID Connect / OAuth 2 issuer
)

// ErrUnrecognized is what an Authenticator in a chain returns (possibly
// wrapped) for a credential that is not of its kind: a static token to an
// OIDC verifier, no client certificate to an mTLS verifier. The chain then
// tries its next method. Any other error means the method recognized the
// credential and refused it, and the chain refuses it too. The engine
// reports it to callers as UNAUTHENTICATED.
var ErrUnrecognized = errors.New("pigeon: credential not recognized")

// Credential is everything a caller presents to prove who it is: a bearer
// token, the certificate chain of its TLS connection, or both. The server
// and the WebSocket endpoint build it from the request; nothing in it comes
// from a message.
type Credential struct {
	// Bearer is the bearer token (the Authorization header or the
	// WebSocket bearer subprotocol); empty when none was sent.
	Bearer string
	// PeerCertificates is the client certificate chain exactly as the peer
	// sent it over TLS (leaf first), or nil. The TLS layer may have only
	// requested it: an authenticator that trusts it must verify it.
	PeerCertificates []*x509.Certificate
	// RemoteAddr is the peer's network address (host:port, or a bare IP),
	// for per-address rate limits and logs; empty in process. The server
	// and the WebSocket endpoint set the TCP peer's. The engine reads its
	// source (the IPv4 address, or the IPv6 /64 prefix) into an auth.failed
	// audit record and counts refused credentials per source
	// (Options.AuthFailureLimit); an embedder
	// that authenticates network clients should fill it, and one without
	// an IP address is never locked out.
	RemoteAddr string
}

// CredentialAuthenticator is an optional ability of an Authenticator: it
// resolves a whole Credential (a client certificate, a bearer token, or
// both) rather than a bearer string. When Options.Authenticator has it,
// the engine hands it every credential, JWTs included, and grant tokens are
// accepted only where it places GrantTokens. Implementations must be safe
// for concurrent use.
type CredentialAuthenticator interface {
	AuthenticateCredential(ctx context.Context, c Credential) (*Principal, error)
}

// GrantTokens returns the Authenticator of the broker's own grant tokens
// (IssueGrant), for a CredentialAuthenticator that tries methods in order:
// it verifies a token against the engine that is authenticating (which it
// finds in ctx), returns ErrUnrecognized for a credential that is not a
// grant token of this broker, and refuses a grant token that is forged,
// expired or revoked. Called outside Engine.Authenticate it refuses
// everything. It is safe for concurrent use.
func GrantTokens() Authenticator { return grantTokens{} }

type grantTokens struct{}

type engineKey struct{}

func (grantTokens) Authenticate(ctx context.Context, credential string) (*Principal, error) {
	e, _ := ctx.Value(engineKey{}).(*Engine)
	if e == nil {
		return nil, NewError(CodeUnauthenticated, "grant tokens are verified by an engine only")
	}
	if !grant.IssuedByBroker(credential) {
		return nil, ErrUnrecognized
	}
	return e.authenticateGrant(credential)
}
