package server

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// trustedProxies are the networks whose connections are proxies in front of
// the server (Options.TrustedProxies): a request from one of them is taken
// to be from the client its X-Forwarded-For header names.
type trustedProxies []netip.Prefix

// ParseTrustedProxies reads Options.TrustedProxies from CIDR prefixes
// ("10.0.0.0/8", "fd00::/8") or addresses (one address's prefix).
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("server: trusted proxy %q is neither an address nor a CIDR prefix", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func (t trustedProxies) trusts(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// client returns the address of the client r comes from: its TCP peer,
// or, when the peer is a trusted proxy, the last address of its
// X-Forwarded-For headers (all of them, in order) that is not a trusted
// proxy's: each proxy appends the address it was reached from, so what
// comes before the first untrusted one from the right was written by the
// client and may be anything. ok is false when r's peer is not a trusted
// proxy, or the header names no usable address; r.RemoteAddr then stands.
func (t trustedProxies) client(r *http.Request) (netip.Addr, bool) {
	if len(t) == 0 {
		return netip.Addr{}, false
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !t.trusts(peer.Addr()) {
		return netip.Addr{}, false
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		h := strings.TrimSpace(hops[i])
		if h == "" {
			continue
		}
		a, err := netip.ParseAddr(h)
		if err != nil {
			// "host:port" or "[v6]:port", as some proxies write it.
			ap, perr := netip.ParseAddrPort(h)
			if perr != nil {
				return netip.Addr{}, false // not an address: trust nothing further left
			}
			a = ap.Addr()
		}
		// A zone ("fe80::1%eth0") names an interface of the host that
		// wrote it, no part of the client's address. Kept, it would reach
		// RemoteAddr, the logs and auth.failed records as the client
		// wrote it: one source under as many names as it liked.
		a = a.Unmap().WithZone("")
		if !t.trusts(a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// fromClient returns r as coming from its client when its peer is a
// trusted proxy (RemoteAddr the client's address, port 0), else r.
func (s *Server) fromClient(r *http.Request) *http.Request {
	a, ok := s.proxies.client(r)
	if !ok {
		return r
	}
	r2 := r.WithContext(r.Context())
	r2.RemoteAddr = net.JoinHostPort(a.String(), "0")
	return r2
}
