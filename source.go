package pigeon

import (
	"fmt"
	"math"
	"net/netip"
)

// sourceIPv6Bits is the prefix length an IPv6 Source is keyed by.
const sourceIPv6Bits = 64

// Defaults of SiteLimit.
const (
	// DefaultSiteBits is SiteLimit.Bits's default: a /48, the most one
	// site is given.
	DefaultSiteBits = 48
	// DefaultSiteFactor is SiteLimit.Factor's default: a site holds as
	// much as 16 of its /64s at their limit.
	DefaultSiteFactor = 16
)

// SiteLimit is how a per-source limit (Options.AuthFailureSite, the
// server's connection cap, identity's handshake limiter) also counts the
// IPv6 /64s of one site together: each IPv6 source counts under its site
// too, the prefix of length Bits it lies in, whose limit is Factor times
// the per-source one. A site's holder may speak from any of its /64s
// (65,536 of a /48), each a source with a fresh count; the site's count
// bounds them all. The price: sites smaller than Bits (a home's /56
// inside a provider's /48, a campus or a carrier NAT64 gateway behind
// one /48) share one count; a wider Bits or a larger Factor loosens it,
// a negative Bits turns it off (each /64 then counts alone). IPv4 sources,
// and IPv6 addresses that carry an IPv4 one (see Source), have no site.
//
// The zero SiteLimit is the default: /48s, at 16 times the per-source
// limit. Check reports values that are not valid.
type SiteLimit struct {
	// Bits is a site's prefix length, 1 to 63 (default DefaultSiteBits,
	// 48; negative: sites are not counted).
	Bits int
	// Factor is a site's limit in per-source limits, at least 1 (default
	// DefaultSiteFactor, 16).
	Factor int
}

// Check reports whether l is valid: Bits 0 (the default), negative (off)
// or 1 to 63 (a site is wider than a source, a /64), and Factor 0 (the
// default) or at least 1.
func (l SiteLimit) Check() error {
	if l.Bits > 0 && l.Bits >= sourceIPv6Bits {
		return fmt.Errorf("site prefix length %d: a site is an IPv6 prefix of 1 to 63 bits, wider than a source's /64 (0: the default, %d; negative: off)", l.Bits, DefaultSiteBits)
	}
	if l.Factor < 0 {
		return fmt.Errorf("site factor %d: a site's limit is at least 1 time the per-source limit (0: the default, %d)", l.Factor, DefaultSiteFactor)
	}
	return nil
}

// Off reports whether sites are not counted (Bits negative).
func (l SiteLimit) Off() bool { return l.Bits < 0 }

// Of is the site src counts under: the prefix of length Bits (0:
// DefaultSiteBits) its /64 lies in. It reports false for an IPv4 source
// (and one an IPv6 address carrying an IPv4 address makes), for the zero
// Source, and when sites are off or l is not valid.
func (l SiteLimit) Of(src Source) (Source, bool) {
	bits := l.Bits
	if bits == 0 {
		bits = DefaultSiteBits
	}
	a := src.p.Addr()
	if !a.Is6() || bits < 0 || bits >= sourceIPv6Bits {
		return Source{}, false
	}
	p, err := a.Prefix(bits)
	return Source{p: p}, err == nil
}

// Limit is the limit of a site whose sources each have perSource:
// Factor (0: DefaultSiteFactor) times it, at most math.MaxInt; 0 when
// perSource is not positive or sites are off.
func (l SiteLimit) Limit(perSource int) int {
	f := l.Factor
	if f == 0 {
		f = DefaultSiteFactor
	}
	switch {
	case perSource <= 0 || l.Off() || f < 0:
		return 0
	case perSource > math.MaxInt/f:
		return math.MaxInt
	}
	return f * perSource
}

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
//
// It is SiteLimit{}.Of(s): a SiteLimit chooses another prefix length.
func (s Source) Site() (Source, bool) { return SiteLimit{}.Of(s) }

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
