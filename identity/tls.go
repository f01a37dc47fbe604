package identity

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
)

// TLSOptions configure ServerTLS.
type TLSOptions struct {
	// Certificate is the server's certificate (required).
	Certificate *CertFile
	// MTLS, when set, asks every client for a certificate (requires one
	// when MTLS.Required) and refuses the handshake of a client whose
	// certificate does not verify.
	MTLS *MTLS
	// Limiter counts failed handshakes per source (an IPv4 address, an
	// IPv6 /64, and the /64s of an IPv6 /48 together, against a higher
	// limit) and refuses the handshakes of a source over its limit.
	// Nil: none. Give it to ServerTLS alone: refused credentials are the
	// engine's to count (pigeon.Options.AuthFailureLimit), and a
	// connection that completed its handshake is not refused here.
	Limiter *Limiter
	// TrustedProxies are TCP peers whose handshakes Limiter neither counts
	// nor refuses: proxies and load balancers in front of the server
	// (server.Options.TrustedProxies, which the server neither locks out
	// nor caps per source either). A load balancer that passes TLS through
	// (as mTLS behind one needs) is the peer of all its clients, and one
	// of them failing handshakes would otherwise have every other's
	// refused for the rest of the window.
	TrustedProxies []netip.Prefix
	// Logger receives one line per refused handshake (the reason and the
	// remote address). Default: discard.
	Logger *slog.Logger
}

// cipherSuites are the TLS 1.2 suites offered: forward secret AEADs only.
// (TLS 1.3 suites are not configurable and all good.)
var cipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// ServerTLS returns the server's TLS configuration: TLS 1.2 or later with
// forward-secret AEAD suites, HTTP/1.1 (WebSocket upgrades need it), the
// certificate of opts.Certificate (reloaded as it changes), and, with
// opts.MTLS, client certificates verified during the handshake. A
// handshake refused for its certificate counts against its source in
// opts.Limiter, unless its TCP peer is one of opts.TrustedProxies.
func ServerTLS(opts *TLSOptions) (*tls.Config, error) {
	if opts == nil || opts.Certificate == nil {
		return nil, errors.New("identity: TLS needs a certificate")
	}
	o := *opts
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	base := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   cipherSuites,
		NextProtos:     []string{"http/1.1"},
		GetCertificate: o.Certificate.GetCertificate,
	}
	if o.MTLS == nil && o.Limiter == nil {
		return base, nil
	}
	if o.MTLS != nil {
		// Verification is ours (VerifyConnection), against each trust
		// domain's own bundle, and so is the refusal of a missing
		// certificate, so that both are counted and logged; ClientCAs only
		// hints which CAs to use.
		base.ClientAuth = tls.RequestClientCert
		base.ClientCAs = o.MTLS.Authorities()
	}
	outer := base.Clone()
	outer.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		remote := ""
		if hello.Conn != nil {
			remote = hello.Conn.RemoteAddr().String()
		}
		lim := o.Limiter
		if trusted(o.TrustedProxies, hello.Conn) {
			lim = nil // its clients' failures are not its own
		}
		if ok, first, by := lim.allow(remote); !ok {
			if first {
				o.Logger.Warn("identity: TLS handshakes refused for the rest of the window", "reason", "too many failed handshakes from this address", "remote", remote, "source", by)
			}
			return nil, errors.New("identity: too many failed handshakes from this address")
		}
		if o.MTLS == nil {
			return nil, nil // the outer configuration
		}
		c := base.Clone()
		c.ClientCAs = o.MTLS.hint() // as reloaded
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				if !o.MTLS.Required() {
					return nil
				}
				lim.Fail(remote, true)
				o.Logger.Info("identity: TLS handshake refused", "reason", "no client certificate, and one is required", "remote", remote)
				return errors.New("identity: a client certificate is required")
			}
			if _, err := o.MTLS.Verify(cs.PeerCertificates); err != nil {
				lim.Fail(remote, true)
				attrs := []any{"remote", remote}
				if cause := errors.Unwrap(err); cause != nil {
					attrs = append(attrs, "reason", cause.Error())
				}
				o.Logger.Info("identity: TLS client certificate refused", attrs...)
				return err
			}
			return nil
		}
		return c, nil
	}
	return outer, nil
}

// trusted reports whether c's TCP peer is in one of proxies.
func trusted(proxies []netip.Prefix, c net.Conn) bool {
	if len(proxies) == 0 || c == nil {
		return false
	}
	a, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	ip := a.AddrPort().Addr().Unmap().WithZone("")
	return slices.ContainsFunc(proxies, func(p netip.Prefix) bool { return p.Contains(ip) })
}
