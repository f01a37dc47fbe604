package pigeon

import "net/netip"

// sourceIPv6Bits is the prefix length an IPv6 Source is keyed by.
const sourceIPv6Bits = 64

// Source is where an attempt comes from, as every per-source limit counts
// it: the engine's lockout after refused credentials
// (Options.AuthFailureLimit) and the source its auth.failed records name,
// the server's per-IP connection cap, and identity's handshake limiter.
//
// An IPv4 address (and an IPv4-mapped IPv6 address, unmapped) is its own
// source. An IPv6 address counts under its /64 prefix: a host is usually
// given a whole /64, 2^64 addresses it may rotate through at will, so
// keying by the address would give it as many fresh counts. The price is
// that hosts sharing one /64 (a LAN behind one router, some hosting
// providers) share a count, as clients behind one IPv4 NAT already do.
//
// A Source is comparable, for map keys. The zero Source is none: an
// address that is not IP (in process, a Unix socket).
type Source struct{ p netip.Prefix }

// SourceOfAddr is the source of a: a /32 for IPv4, a /64 for IPv6, the
// zone dropped.
func SourceOfAddr(a netip.Addr) Source {
	a = a.Unmap().WithZone("")
	bits := 32
	if a.Is6() {
		bits = sourceIPv6Bits
	}
	p, err := a.Prefix(bits) // the zero Addr: the zero Prefix, no error
	if err != nil {
		return Source{}
	}
	return Source{p: p}
}

// SourceOf is the source of a remote address such as
// Credential.RemoteAddr: host:port (an IPv6 host in brackets) or a bare
// IP address, with or without a zone; the zero Source when it names no IP
// address.
func SourceOf(remote string) Source {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return SourceOfAddr(ap.Addr())
	}
	if a, err := netip.ParseAddr(remote); err == nil {
		return SourceOfAddr(a)
	}
	return Source{}
}

// IsValid reports whether s is a source (not the zero Source).
func (s Source) IsValid() bool { return s.p.IsValid() }

// Prefix is s as a prefix: a /32 for IPv4, a /64 for IPv6.
func (s Source) Prefix() netip.Prefix { return s.p }

// String is an IPv4 source's address ("192.0.2.1"), an IPv6 source's
// prefix ("2001:db8:1:2::/64"), or "" for the zero Source. The engine's
// auth.failed records name the source so.
func (s Source) String() string {
	switch {
	case !s.p.IsValid():
		return ""
	case s.p.Addr().Is4():
		return s.p.Addr().String()
	}
	return s.p.String()
}
