package identity

import (
	"context"
	"errors"
	"log/slog"

	"pigeon"
)

// ChainOptions configure a Chain. A nil *ChainOptions means the defaults;
// NewChain copies the value.
type ChainOptions struct {
	// Limiter, when set, counts the chain's refusals per source and
	// refuses a source that failed too often (RATE_LIMITED) before any
	// method runs. Nil (the default): none.
	//
	// Deprecated: the engine counts every refused credential per source
	// and locks the source out (pigeon.Options.AuthFailureLimit, audited,
	// with Retry-After); a Limiter here counts the same refusals a second
	// time, in a window of its own. Give a Limiter to ServerTLS alone, for
	// failed handshakes.
	Limiter *Limiter
	// Logger receives one line per refusal: method, code, reason and remote
	// address; never a token, a certificate or a key. Default: discard.
	Logger *slog.Logger
}

// Method is one way of proving identity, tried in a Chain under its Name.
type Method struct {
	Name pigeon.AuthMethod
	Auth pigeon.CredentialAuthenticator
}

// Chain tries its methods in order. A method that does not recognize the
// credential (pigeon.ErrUnrecognized) passes it on; the first that
// recognizes it decides: its principal is the caller, its refusal is final
// and never passed on. A credential no method recognizes is refused
// UNAUTHENTICATED. Every refusal is logged; counting refusals against
// their source is the engine's (pigeon.Options.AuthFailureLimit), which
// sees every refusal once. Use it as pigeon.Options.Authenticator. It is
// immutable once built and safe for concurrent use.
type Chain struct {
	methods []Method
	limiter *Limiter
	log     *slog.Logger
}

var (
	_ pigeon.CredentialAuthenticator = (*Chain)(nil)
	_ pigeon.Authenticator           = (*Chain)(nil)
)

// NewChain returns the chain of methods, in order.
func NewChain(opts *ChainOptions, methods ...Method) *Chain {
	var o ChainOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Chain{methods: append([]Method(nil), methods...), limiter: o.Limiter, log: o.Logger}
}

// Methods returns the names of the methods, in order.
func (c *Chain) Methods() []pigeon.AuthMethod {
	out := make([]pigeon.AuthMethod, len(c.methods))
	for i, m := range c.methods {
		out[i] = m.Name
	}
	return out
}

// Authenticate implements pigeon.Authenticator for a bare bearer token.
func (c *Chain) Authenticate(ctx context.Context, bearer string) (*pigeon.Principal, error) {
	return c.AuthenticateCredential(ctx, pigeon.Credential{Bearer: bearer})
}

// AuthenticateCredential implements pigeon.CredentialAuthenticator.
func (c *Chain) AuthenticateCredential(ctx context.Context, cred pigeon.Credential) (*pigeon.Principal, error) {
	if ok, first, by := c.limiter.allow(cred.RemoteAddr); !ok {
		if first {
			c.log.Warn("identity: authentication refused for the rest of the window", "code", pigeon.CodeRateLimited,
				"reason", "too many failed authentications from this address", "remote", cred.RemoteAddr, "source", by)
		}
		return nil, pigeon.NewError(pigeon.CodeRateLimited, "too many failed authentications from this address; try again later")
	}
	for _, m := range c.methods {
		p, err := c.try(ctx, m, cred)
		if errors.Is(err, pigeon.ErrUnrecognized) {
			continue
		}
		if err == nil && (p == nil || p.ID == "") {
			err = pigeon.NewError(pigeon.CodeUnauthenticated, "the credential names no principal")
		}
		if err != nil {
			c.refused(m.Name, cred, err)
			return nil, err
		}
		if p.Method == "" {
			q := *p // a method may hand out a shared principal
			q.Method = m.Name
			p = &q
		}
		return p, nil
	}
	err := pigeon.NewError(pigeon.CodeUnauthenticated, "unknown or missing credential")
	if cred.Bearer != "" || len(cred.PeerCertificates) > 0 {
		c.refused("", cred, err)
	}
	return nil, err
}

// try asks m about cred. A panic of m (a bug of the method's, met on a
// credential the client chose) is m's refusal: it is logged and counted
// as one, and passed on untouched to the engine, which recovers it and
// refuses the credential as unknown (pigeon.Options.Authenticator). It
// unwound past the count before, and a deprecated Limiter never saw the
// source that made the method panic.
func (c *Chain) try(ctx context.Context, m Method, cred pigeon.Credential) (p *pigeon.Principal, err error) {
	done := false
	defer func() {
		if !done {
			c.refused(m.Name, cred, pigeon.NewError(pigeon.CodeUnauthenticated, "the method panicked on the credential"))
		}
	}()
	p, err = m.Auth.AuthenticateCredential(ctx, cred)
	done = true
	return p, err
}

// refused logs a refusal (and counts it, with a deprecated Limiter). The reason is the error's message and
// cause, which the methods keep free of credential material.
func (c *Chain) refused(method pigeon.AuthMethod, cred pigeon.Credential, err error) {
	c.limiter.Fail(cred.RemoteAddr, false)
	attrs := []any{"code", pigeon.ErrorCode(err), "remote", cred.RemoteAddr}
	if method != "" {
		attrs = append(attrs, "method", method)
	}
	var pe *pigeon.Error
	if errors.As(err, &pe) {
		attrs = append(attrs, "reason", pe.Message)
		if cause := pe.Unwrap(); cause != nil {
			attrs = append(attrs, "detail", cause.Error())
		}
	}
	c.log.Info("identity: authentication refused", attrs...)
}

// Bearer adapts an Authenticator that follows the chain's protocol
// (pigeon.ErrUnrecognized for a credential not of its kind, such as
// pigeon.GrantTokens()) to a method: it sees the bearer token only, and a
// credential without one is not recognized.
func Bearer(a pigeon.Authenticator) pigeon.CredentialAuthenticator { return bearer{a: a} }

type bearer struct{ a pigeon.Authenticator }

func (b bearer) AuthenticateCredential(ctx context.Context, c pigeon.Credential) (*pigeon.Principal, error) {
	if c.Bearer == "" {
		return nil, pigeon.ErrUnrecognized
	}
	return b.a.Authenticate(ctx, c.Bearer)
}

// Lookup adapts a table of bearer tokens (pigeon.StaticTokens) to a
// method: a token the table does not know (UNAUTHENTICATED) is not
// recognized, so a later method may still know it.
func Lookup(a pigeon.Authenticator) pigeon.CredentialAuthenticator { return lookup{a: a} }

type lookup struct{ a pigeon.Authenticator }

func (l lookup) AuthenticateCredential(ctx context.Context, c pigeon.Credential) (*pigeon.Principal, error) {
	if c.Bearer == "" {
		return nil, pigeon.ErrUnrecognized
	}
	p, err := l.a.Authenticate(ctx, c.Bearer)
	if pigeon.ErrorCode(err) == pigeon.CodeUnauthenticated {
		return nil, pigeon.ErrUnrecognized
	}
	return p, err
}
