// Package identity proves who a caller is at the edge of a networked
// broker: TLS for the server, client certificates carrying SPIFFE IDs
// (mTLS), and JWT bearer tokens of OpenID Connect / OAuth 2 identity
// providers. It lives apart from package pigeon so that embedding the broker
// does not compile JOSE or X.509 SVID code.
//
// # Methods and the chain
//
// Each method is a pigeon.CredentialAuthenticator: MTLS verifies the
// certificate chain of the TLS connection (go-spiffe), OIDC verifies a JWT
// against its issuer's JSON Web Key Set (go-jose), and Bearer and Lookup
// adapt the broker's grant tokens (pigeon.GrantTokens()) and static tokens
// (pigeon.StaticTokens). A Chain tries them in a configured order: a method
// that does not recognize the credential returns pigeon.ErrUnrecognized and
// the next one is tried; one that recognizes and refuses it ends the chain.
// The Chain is given to pigeon.Options.Authenticator; package server and
// package transport/ws hand it the bearer token, the TLS peer certificates
// and the remote address of each request.
//
// The principal is the SPIFFE ID (which has a path: the ID of a trust
// domain itself names no caller), or the configured claim of the token
// (text: a claim holding a control character or U+FFFD, what the JSON
// decoder makes of bytes that are not UTF-8, is refused). A trust
// domain's authorities must be certificate authorities.
// Roles and attributes of a certificate principal come from its account in
// the broker's directory, so revoking a role takes effect at the next
// check; a token's roles claim adds roles, as a static token's do. The
// principal's Expires is when its credential stops being valid (a token's
// exp plus the issuer's leeway, the chain's earliest NotAfter): the
// contracts it negotiates end then at the latest.
//
// # Failure
//
// Each failure is counted once, per source (a remote IPv4 address, or a
// remote IPv6 /64). A refused credential reaches the engine, which counts
// it and locks out a source that failed too often (RATE_LIMITED, with
// Retry-After, before any verification work; pigeon.Options.AuthFailureLimit).
// A failed TLS handshake never reaches the engine: a Limiter given to
// ServerTLS counts those, and refuses the handshakes of a source that
// failed too many, and of an IPv6 /48 whose /64s together failed 16
// times as many (LimiterOptions.MaxPrefixFailures). Log lines and errors
// say why a credential was refused, never what it was: no token,
// certificate or key material appears in them. When an identity provider cannot be reached,
// its cached keys keep verifying tokens for Issuer.MaxKeyAge, and a token
// signed by a key not in the cache is refused IDENTITY_UNAVAILABLE. A key
// set that was read is the provider's answer even when it holds no usable
// key: the keys it no longer lists stop verifying at once. An
// issuer's keys are read over HTTPS only (plain HTTP only from a loopback
// address), whatever names their URL: the configuration, a discovery
// document or a redirect; a key set read in plain text would let whoever
// is on the path sign any principal.
//
// # Concurrency
//
// Every type is safe for concurrent use once built. CertFile reloads the
// server certificate while handshakes continue; open connections keep the
// certificate they negotiated. OIDC.Run refreshes keys in the background
// until its context ends; unknown key ids refresh on demand, at most once
// per Issuer.MinRefreshInterval, concurrent callers sharing one fetch.
package identity
