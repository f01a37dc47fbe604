// Package netsource reads the source of a network address as the
// per-source limits count it: the auth lockout (pigeon's authGuard), its
// audit records, the server's per-address connection cap and identity's
// handshake limiter all key by Of or OfAddr, so that one client is one
// source everywhere.
//
// An IPv4 address (and an IPv4-mapped IPv6 address, unmapped) is its own
// source. An IPv6 address counts under its /64 prefix: a host is usually
// given a whole /64, 2^64 addresses it may rotate through at will, so
// keying by the address would give it as many fresh counts. The price is
// that hosts sharing one /64 (a LAN behind one router, some hosting
// providers) share a count, as clients behind one IPv4 NAT already do.
package netsource

import (
	"net"
	"net/netip"
)

// IPv6Bits is the prefix length an IPv6 source is keyed by.
const IPv6Bits = 64

// Key is a source: an IPv4 address as a /32, or an IPv6 /64, without a
// zone. It is comparable, for map keys. The zero Key is no source (an
// address that is not IP: in process, a Unix socket).
type Key struct{ p netip.Prefix }

// OfAddr is the source of a.
func OfAddr(a netip.Addr) Key {
	a = a.Unmap().WithZone("")
	bits := 32
	if a.Is6() {
		bits = IPv6Bits
	}
	p, err := a.Prefix(bits) // the zero Addr: the zero Prefix, no error
	if err != nil {
		return Key{}
	}
	return Key{p: p}
}

// Of is the source of a remote address: host:port (an IPv6 host in
// brackets) or a bare IP address, with or without a zone; the zero Key
// when it names no IP address.
func Of(remote string) Key {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return OfAddr(ap.Addr())
	}
	if a, err := netip.ParseAddr(remote); err == nil {
		return OfAddr(a)
	}
	return Key{}
}

// OfNet is the source of a net.Addr: a TCP or UDP peer's, or the zero Key.
func OfNet(a net.Addr) Key {
	switch a := a.(type) {
	case *net.TCPAddr:
		return OfAddr(a.AddrPort().Addr())
	case *net.UDPAddr:
		return OfAddr(a.AddrPort().Addr())
	case nil:
		return Key{}
	}
	return Of(a.String())
}

// IsValid reports whether k is a source (not the zero Key).
func (k Key) IsValid() bool { return k.p.IsValid() }

// Prefix is k as a prefix: a /32 for IPv4, a /64 for IPv6.
func (k Key) Prefix() netip.Prefix { return k.p }

// String is an IPv4 source's address ("192.0.2.1"), an IPv6 source's
// prefix ("2001:db8:1:2::/64"), or "" for the zero Key.
func (k Key) String() string {
	switch {
	case !k.p.IsValid():
		return ""
	case k.p.Addr().Is4():
		return k.p.Addr().String()
	}
	return k.p.String()
}
