package server

import (
	"net"
	"net/netip"
	"path"
	"strings"
)

// A DNS rebinding page is a page of the attacker's name whose address is
// later made the server's: the browser then takes the server for the
// page's own origin, so the cross-site refusal (crossSite) and CORS do not
// apply, and the page's script may send any header, a bearer token among
// them, in requests whose Host is the attacker's name. Options.AllowedHosts
// names the host names the server answers to, so that such requests are
// refused before their credential is looked at; `pigeon serve` on a
// loopback address (the quickstart, whose demo tokens are public) answers
// only to localhost unless told otherwise.

// hostAllowed reports whether a request for host (a Host header, with or
// without a port) may be served: any when no names are allowed, an IP
// literal always (a page of an IP address is of its own origin, which the
// cross-site refusal covers), else a name that a pattern of allowed
// matches, as origin patterns match (path.Match syntax, any case:
// "localhost", "*.example.com" for its subdomains), its port aside.
func hostAllowed(host string, allowed []string) bool {
	if len(allowed) == 0 {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	for _, p := range allowed {
		if ok, err := path.Match(strings.ToLower(p), host); err == nil && ok {
			return true
		}
	}
	return false
}

// LoopbackHosts are the host names a server on a loopback address answers
// to by default (beside IP literals): what `pigeon serve` allows when it
// listens on 127.0.0.1 or localhost and no allowed hosts are given.
var LoopbackHosts = []string{"localhost", "*.localhost"}
