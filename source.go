package pigeon

import "net/netip"

// sourceIPv6Bits is the prefix length an IPv6 Source is keyed by, and
// siteIPv6Bits that of its Site.
const (
	sourceIPv6Bits = 64
	siteIPv6Bits   = 48
)

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
// An IPv6 address that carries the IPv4 address its replies are routed
// to counts as that IPv4 address: under 64:ff9b::/96 (RFC 6052, the
// prefix a translator such as SIIT gives IPv4 clients of an IPv6-only
// broker: by /64, every IPv4 client would share one count, and one
// guesser would lock them all out), 2002::/16 (6to4, RFC 3056: an IPv4
// address holds the whole 2002:V4ADDR::/48, 65,536 /64s, fresh counts
// for the asking) and 2001::/32 (Teredo, RFC 4380: the client's public
// IPv4 address, inverted, in the last 32 bits; the flags give one client
// many /64s). Replies to such an address reach that IPv4 host only, so
// a client cannot claim another's count.
//
// A Source is comparable, for map keys. The zero Source is none: an
// address that is not IP (in process, a Unix socket).
type Source struct{ p netip.Prefix }

// SourceOfAddr is the source of a: a /32 for IPv4 (and for an IPv6
// address that carries one, above), a /64 for IPv6, the zone dropped.
func SourceOfAddr(a netip.Addr) Source {
	a = embeddedIPv4(a.Unmap().WithZone(""))
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

// embeddedIPv4 is the IPv4 address a translated (64:ff9b::/96), 6to4
// (2002::/16) or Teredo (2001::/32) IPv6 address carries, or a itself.
func embeddedIPv4(a netip.Addr) netip.Addr {
	if !a.Is6() {
		return a
	}
	b := a.As16()
	switch {
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4]|b[5]|b[6]|b[7]|b[8]|b[9]|b[10]|b[11] == 0:
		return netip.AddrFrom4([4]byte(b[12:16]))
	case b[0] == 0x20 && b[1] == 0x02:
		return netip.AddrFrom4([4]byte(b[2:6]))
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00:
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
	}
	return a
}

// SourceOf is the source of a remote address such as
// Credential.RemoteAddr: host:port (an IPv6 host in brackets) or a bare
// IP address, with or without a zone; the zero Source when it names no IP
// address.
func SourceOf(remote string) Source {
	if remote == "" {
		return Source{} // in process: no source, and no parse errors to allocate
	}
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

// Site is the IPv6 /48 an IPv6 source lies in, which the per-source
// limits also count it under, together with the other /64s of it,
// against a higher bound: a /48 is the most one site is given, and its
// holder may speak from any of its 65,536 /64s, each a source with a
// fresh count. It reports false for an IPv4 source (and one an IPv6
// address carrying an IPv4 address makes: its /48 holds many IPv4
// clients) and for the zero Source.
func (s Source) Site() (Source, bool) {
	a := s.p.Addr()
	if !a.Is6() {
		return Source{}, false
	}
	p, err := a.Prefix(siteIPv6Bits)
	return Source{p: p}, err == nil
}

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
