package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"pigeon"
	"pigeon/identity"
)

// edge is how serve proves who its callers are: the TLS configuration
// (nil: plain HTTP) and the chain of authentication methods.
type edge struct {
	auth *identity.Chain
	tls  *tls.Config
	cert *identity.CertFile // reloaded on SIGHUP
	// reloadCAs reads the client CA files again (on SIGHUP); nil without
	// mTLS. On error the authorities in use stay.
	reloadCAs func() error
	oidc      *identity.OIDC // run in the background to refresh keys
	order     []string
}

// buildEdge checks the identity settings and builds the edge. A file that
// cannot be read is refused naming it.
func buildEdge(cfg serveConfig, tokens []pigeon.StaticToken, logger *slog.Logger) (*edge, error) {
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	files := append([]string{cfg.tlsCert, cfg.tlsKey}, cfg.clientCA...)
	for _, td := range cfg.trustDomains {
		files = append(files, cfg.domainCA[td]...)
	}
	for _, f := range files {
		if err := checkNotWorldWritable(f); err != nil {
			return nil, err
		}
	}
	mtlsOn := len(cfg.clientCA) > 0 || len(cfg.domainCA) > 0
	if mtlsOn && cfg.tlsCert == "" {
		return nil, errors.New("--client-ca needs TLS: give --tls-cert and --tls-key")
	}
	if mtlsOn && len(cfg.trustDomains) == 0 {
		return nil, errors.New("--client-ca needs at least one --trust-domain whose certificates are accepted")
	}
	for _, td := range cfg.trustDomains {
		if len(cfg.clientCA) == 0 && len(cfg.domainCA[td]) == 0 {
			return nil, fmt.Errorf("trust domain %q has no CA: give --client-ca, or its own ca in the config file", td)
		}
	}
	mode := cfg.mtlsMode
	if mode == "" {
		mode = "required"
	}
	if mode != "required" && mode != "optional" {
		return nil, fmt.Errorf("--mtls-mode must be required or optional, not %q", cfg.mtlsMode)
	}
	for _, td := range cfg.trustDomains {
		if err := checkTrustDomain(td); err != nil {
			return nil, err
		}
	}
	if err := cfg.site.Check(); err != nil { // identity.NewLimiter would panic
		return nil, fmt.Errorf("--ipv6-site-prefix, --ipv6-site-factor: %w", err)
	}
	e := &edge{}
	methods := map[string]identity.Method{
		string(pigeon.AuthGrant): {Name: pigeon.AuthGrant, Auth: identity.Bearer(pigeon.GrantTokens())},
		string(pigeon.AuthToken): {Name: pigeon.AuthToken, Auth: identity.Lookup(pigeon.NewStaticTokens(tokens...))},
	}
	var mtls *identity.MTLS
	if mtlsOn {
		tds, err := trustDomains(cfg)
		if err != nil {
			return nil, err
		}
		if mtls, err = identity.NewMTLS(&identity.MTLSOptions{TrustDomains: tds, Required: mode == "required"}); err != nil {
			return nil, err
		}
		methods[string(pigeon.AuthMTLS)] = identity.Method{Name: pigeon.AuthMTLS, Auth: mtls}
		e.reloadCAs = func() error {
			tds, err := trustDomains(cfg)
			if err != nil {
				return err
			}
			return mtls.Reload(tds)
		}
	}
	if len(cfg.issuers) > 0 {
		o, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: cfg.issuers, Logger: logger})
		if err != nil {
			return nil, err
		}
		e.oidc = o
		methods[string(pigeon.AuthOIDC)] = identity.Method{Name: pigeon.AuthOIDC, Auth: o}
	}
	order := cfg.authOrder
	if len(order) == 0 {
		for _, m := range authMethods {
			if _, ok := methods[m]; ok {
				order = append(order, m)
			}
		}
	}
	var chain []identity.Method
	for i, m := range order {
		if !slices.Contains(authMethods, m) {
			return nil, fmt.Errorf("auth order: unknown method %q (known: %s)", m, strings.Join(authMethods, ", "))
		}
		if slices.Contains(order[:i], m) {
			return nil, fmt.Errorf("auth order: %q is listed twice", m)
		}
		meth, ok := methods[m]
		if !ok {
			return nil, fmt.Errorf("auth order: %q is not configured", m)
		}
		chain = append(chain, meth)
	}
	for _, m := range []string{string(pigeon.AuthMTLS), string(pigeon.AuthOIDC)} {
		if _, ok := methods[m]; ok && !slices.Contains(order, m) {
			return nil, fmt.Errorf("auth order leaves out %q, which is configured", m)
		}
	}
	if mtls != nil && mtls.Required() && order[0] != string(pigeon.AuthMTLS) {
		return nil, errors.New("auth order: with --mtls-mode required, mtls comes first")
	}
	if len(chain) == 0 {
		return nil, errors.New("auth order: no method: nobody could connect")
	}
	e.order = order
	// Refused credentials are counted by the engine (AuthFailureLimit,
	// from the same settings); the chain counts nothing, so that each
	// refusal counts once. Failed handshakes never reach the engine: the
	// limiter counts those, under the same limit but apart.
	e.auth = identity.NewChain(&identity.ChainOptions{Logger: logger}, chain...)
	if cfg.tlsCert != "" {
		limiter := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: cfg.maxFailures, Window: cfg.failureWindow, Site: cfg.site})
		cf, err := identity.LoadCertFile(cfg.tlsCert, cfg.tlsKey, logger)
		if err != nil {
			return nil, fmt.Errorf("TLS certificate: %w", err)
		}
		tc, err := identity.ServerTLS(&identity.TLSOptions{Certificate: cf, MTLS: mtls, Limiter: limiter, TrustedProxies: mustProxies(cfg.trustedProxies), Logger: logger})
		if err != nil {
			return nil, err
		}
		e.cert, e.tls = cf, tc
	}
	return e, nil
}

// trustDomains reads the CA files of cfg's trust domains: each its own
// bundle (config file), or the shared --client-ca ones. A file that cannot
// be read, or that others may write, is refused naming it.
func trustDomains(cfg serveConfig) ([]identity.TrustDomain, error) {
	var shared []*x509.Certificate
	if len(cfg.clientCA) > 0 {
		for _, f := range cfg.clientCA {
			if err := checkNotWorldWritable(f); err != nil {
				return nil, err
			}
		}
		var err error
		if shared, err = identity.LoadCAFiles(cfg.clientCA...); err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
	}
	tds := make([]identity.TrustDomain, len(cfg.trustDomains))
	for i, td := range cfg.trustDomains {
		tds[i] = identity.TrustDomain{Name: td, Authorities: shared}
		if own := cfg.domainCA[td]; len(own) > 0 {
			for _, f := range own {
				if err := checkNotWorldWritable(f); err != nil {
					return nil, err
				}
			}
			cas, err := identity.LoadCAFiles(own...)
			if err != nil {
				return nil, fmt.Errorf("CA of trust domain %s: %w", td, err)
			}
			tds[i].Authorities = cas
		}
	}
	return tds, nil
}

// reload reloads the server certificate and, with cas (not nil), the
// client CAs, logging what each did: what fails to load leaves what is in
// use (CertFile logs its own failure). It reports whether the client CAs
// were reloaded.
func reload(cf *identity.CertFile, cas func() error, logger *slog.Logger) bool {
	if err := cf.Reload(); err == nil {
		logger.Info("pigeon: SIGHUP: certificate reloaded")
	}
	if cas == nil {
		return false
	}
	if err := cas(); err != nil {
		logger.Error("pigeon: SIGHUP: client CAs not reloaded; the previous ones stay in use", "reason", err.Error())
		return false
	}
	logger.Info("pigeon: SIGHUP: client CAs reloaded")
	return true
}

// reauthTimeout bounds the check of the open connections after a reload.
const reauthTimeout = time.Minute

// hangup is what SIGHUP does: reload, and once the client CAs are
// reloaded, reauth (server.Server.Reauthenticate): the credential of every
// open WebSocket connection is checked again, and each connection opened
// with a certificate the new CAs refuse is ended (its contracts revoked,
// closed 1008 UNAUTHENTICATED) rather than kept until it closes.
func hangup(ctx context.Context, cf *identity.CertFile, cas func() error, reauth func(context.Context) (int, error), logger *slog.Logger) {
	if !reload(cf, cas, logger) || reauth == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, reauthTimeout)
	defer cancel()
	ended, err := reauth(rctx)
	if err != nil {
		logger.Error("pigeon: SIGHUP: some open connections could not be checked against the reloaded client CAs; they stay open",
			"ended", ended, "reason", err.Error())
		return
	}
	logger.Info("pigeon: SIGHUP: open connections checked against the reloaded client CAs", "ended", ended)
}
