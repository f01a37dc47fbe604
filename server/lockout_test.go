package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/server"
)

// acceptFixture is a server run by Serve on 127.0.0.1, whose engine locks
// a source out after three refused credentials in a minute, with a test
// clock. Over TLS, hellos counts the ClientHellos the server read: the
// handshakes it began.
type acceptFixture struct {
	s      *server.Server
	addr   string
	clock  *testclock.Clock
	pool   *x509.CertPool // the roots of the server's certificate (TLS)
	hellos atomic.Int64
}

func newAcceptFixture(t *testing.T, useTLS bool, o server.Options) *acceptFixture {
	t.Helper()
	f := &acceptFixture{clock: testclock.New(time.Now())}
	if useTLS {
		cert := httptest.NewTLSServer(http.NotFoundHandler())
		cfg := cert.TLS.Clone()
		f.pool = cert.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
		cert.Close()
		cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			f.hellos.Add(1)
			return nil, nil
		}
		o.TLS = cfg
	}
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator:    pigeon.NewStaticTokens(pigeon.StaticToken{Token: "valid-token-Kx9", Principal: "svc", Roles: []string{"auditor"}}),
		Now:              f.clock.Now,
		AuthFailureLimit: 3, AuthFailureWindow: time.Minute,
	})
	require.NoError(t, err)
	f.s = server.New(e, &o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = l.Addr().String()
	served := make(chan error, 1)
	go func() { served <- f.s.Serve(l) }()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, f.s.Shutdown(sctx))
		require.ErrorIs(t, <-served, http.ErrServerClosed)
		require.NoError(t, e.Shutdown(sctx))
	})
	return f
}

// local is the address to dial from: ip, port any. It skips the test
// when this host cannot send from ip.
func local(t *testing.T, ip string) *net.TCPAddr {
	t.Helper()
	a := &net.TCPAddr{IP: net.ParseIP(ip)}
	d := net.Dialer{LocalAddr: a}
	if c, err := d.Dial("tcp", "127.0.0.1:1"); err != nil && strings.Contains(err.Error(), "assign requested address") {
		t.Skipf("cannot send from %s here: %v", ip, err)
	} else if c != nil {
		_ = c.Close()
	}
	return a
}

// dialTLS opens a TLS connection from from and completes its handshake.
func (f *acceptFixture) dialTLS(from *net.TCPAddr) error {
	c, err := tls.DialWithDialer(&net.Dialer{LocalAddr: from, Timeout: 5 * time.Second}, "tcp", f.addr,
		&tls.Config{RootCAs: f.pool, ServerName: "example.com"})
	if err == nil {
		_ = c.Close()
	}
	return err
}

// do sends GET /v1/audit with token on a new connection from from (over
// TLS when the server speaks it), the header pairs set, and returns the
// answer's status and Retry-After.
func (f *acceptFixture) do(t *testing.T, from *net.TCPAddr, token string, header ...string) (int, string) {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: from, Timeout: 5 * time.Second}).DialContext,
		TLSClientConfig: &tls.Config{RootCAs: f.pool, ServerName: "example.com"}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	scheme := "http://"
	if f.pool != nil {
		scheme = "https://"
	}
	req, err := http.NewRequest(http.MethodGet, scheme+f.addr+"/v1/audit", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// lockOut presents three refused tokens from from, the header pairs set.
func (f *acceptFixture) lockOut(t *testing.T, from *net.TCPAddr, header ...string) {
	t.Helper()
	for i := range 3 {
		status, _ := f.do(t, from, "guess-"+strconv.Itoa(i), header...)
		require.Equal(t, http.StatusUnauthorized, status)
	}
}

// TestLockedOutSourceRefusedBeforeTLSHandshake: once a source is locked
// out for refused credentials, its new TLS connections are closed as they
// are accepted: the handshake fails and the server never read its
// ClientHello (one succeeded from the same address before). Another
// source handshakes as usual, the refusals are counted, and once the
// lockout ends the source connects again.
func TestLockedOutSourceRefusedBeforeTLSHandshake(t *testing.T) {
	f := newAcceptFixture(t, true, server.Options{})
	attacker, other := local(t, "127.0.0.1"), local(t, "127.0.0.2")
	require.NoError(t, f.dialTLS(attacker), "before the lockout")
	f.lockOut(t, attacker)
	require.Zero(t, f.s.ConnStats().LockedOut)

	for range 5 {
		hellos := f.hellos.Load()
		require.Error(t, f.dialTLS(attacker), "the handshake of a locked-out source fails")
		require.Equal(t, hellos, f.hellos.Load(), "the server began no handshake")
	}
	require.EqualValues(t, 5, f.s.ConnStats().LockedOut)
	require.Zero(t, f.s.ConnStats().Refused, "not a limit's refusals")

	hellos := f.hellos.Load()
	require.NoError(t, f.dialTLS(other), "another source")
	require.Greater(t, f.hellos.Load(), hellos)
	status, _ := f.do(t, other, "valid-token-Kx9")
	require.Equal(t, http.StatusOK, status)

	f.clock.Advance(time.Minute)
	require.NoError(t, f.dialTLS(attacker), "the lockout has ended")
	status, _ = f.do(t, attacker, "valid-token-Kx9")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 5, f.s.ConnStats().LockedOut)
}

// TestLockedOutTrustedProxyStillAccepted: a TCP peer that is a trusted
// proxy is never cut off at accept, even when its own address is locked
// out (by requests it sent without X-Forwarded-For): the clients behind
// it are known only from the header. Its connections handshake, a client
// behind it authenticates, and its own requests are still refused 429 by
// the API. The same peer, untrusted, is cut off.
func TestLockedOutTrustedProxyStillAccepted(t *testing.T) {
	proxy := local(t, "127.0.0.1")
	for _, trusted := range []bool{true, false} {
		t.Run("trusted="+strconv.FormatBool(trusted), func(t *testing.T) {
			var o server.Options
			if trusted {
				o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
			}
			f := newAcceptFixture(t, true, o)
			f.lockOut(t, proxy) // no X-Forwarded-For: the proxy's own source
			if !trusted {
				require.Error(t, f.dialTLS(proxy))
				require.EqualValues(t, 1, f.s.ConnStats().LockedOut)
				return
			}
			for range 3 {
				require.NoError(t, f.dialTLS(proxy), "a trusted proxy handshakes")
			}
			status, _ := f.do(t, proxy, "valid-token-Kx9", "X-Forwarded-For", "203.0.113.8")
			require.Equal(t, http.StatusOK, status, "a client behind the proxy")
			status, retry := f.do(t, proxy, "valid-token-Kx9")
			require.Equal(t, http.StatusTooManyRequests, status, "the proxy's own source is still locked out by the API")
			require.Equal(t, "60", retry)
			require.Zero(t, f.s.ConnStats().LockedOut)
		})
	}
}

// TestLockedOutSourceAnsweredAtAcceptOverHTTP: over plain HTTP a locked-out
// source's new connection is answered 429 RATE_LIMITED with the Retry-After
// of its lockout as it is accepted, whatever the request (a public route
// included), and closed; the refusal is counted.
func TestLockedOutSourceAnsweredAtAcceptOverHTTP(t *testing.T) {
	f := newAcceptFixture(t, false, server.Options{})
	attacker := local(t, "127.0.0.1")
	f.lockOut(t, attacker)
	f.clock.Advance(20 * time.Second)
	c, err := (&net.Dialer{LocalAddr: attacker, Timeout: 5 * time.Second}).Dial("tcp", f.addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil) // answered before any request is sent
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "40", resp.Header.Get("Retry-After"))
	require.Contains(t, string(b), string(pigeon.CodeRateLimited))
	require.True(t, resp.Close, "Connection: close")
	status, _ := fresh(t, f.addr, attacker)
	require.Equal(t, http.StatusTooManyRequests, status, "a public route too")
	require.EqualValues(t, 2, f.s.ConnStats().LockedOut)
}

// TestMaxConnectionsPerIPExemptsTrustedProxies: a TCP peer that is a
// trusted proxy holds more than MaxConnectionsPerIP (its clients are many
// sources), while an untrusted peer is capped; the proxy's connections
// still count toward MaxConnections.
func TestMaxConnectionsPerIPExemptsTrustedProxies(t *testing.T) {
	proxy, direct := local(t, "127.0.0.1"), local(t, "127.0.0.2")
	_, addr := limitServer(t, &server.Options{MaxConnectionsPerIP: 1, MaxConnections: 5,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	for range 3 {
		heldConn(t, addr, proxy)
	}
	heldConn(t, addr, direct)
	status, code := fresh(t, addr, direct)
	require.Equal(t, http.StatusTooManyRequests, status, "an untrusted peer is capped (4 of 5 open)")
	require.Equal(t, pigeon.CodeRateLimited, code)
	heldConn(t, addr, proxy)
	status, _ = fresh(t, addr, proxy)
	require.Equal(t, http.StatusTooManyRequests, status, "the proxy counts toward MaxConnections")
}
