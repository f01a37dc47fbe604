package server

import (
	"net/http"
	"strings"

	"pigeon/transport/mesgd"
	"pigeon/transport/ws"
)

// corsAllowHeaders are the request headers a browser page on an allowed
// origin may send: the bearer credential, the contract and region of a
// call, a JSON body and a request id.
const corsAllowHeaders = "Authorization, Content-Type, X-Pigeon-Contract, X-Pigeon-Region, X-Request-Id"

// corsAllowMethods are the methods of the API's routes.
const corsAllowMethods = "GET, POST, PUT, DELETE"

// cors answers what a browser asks of a cross-origin call from an
// allowed origin: the Access-Control headers on every answer, and a
// preflight (OPTIONS with Access-Control-Request-Method) answered 204
// here. It reports whether the request was a preflight it answered. An
// origin that is not allowed gets no Access-Control headers, so the
// browser withholds the answer, and crossSite refuses the request itself
// before its credential is looked at.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || !ws.OriginAllowed(s.opts.AllowedOrigins, origin) {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		h.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After, WWW-Authenticate")
		return false
	}
	h.Set("Access-Control-Allow-Methods", corsAllowMethods)
	h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// crossSite reports whether r was sent by a browser for a page of another
// origin than the server's, one AllowedOrigins does not name, and is not
// a navigation of the browser's window to a page of the server. Such a
// request is refused before its credential is looked at (ServeHTTP), for
// two reasons. A page can have a browser send a request that changes
// something without asking first (a form, or fetch in no-cors mode), with
// the browser's ambient credential: a TLS client certificate, which mTLS
// takes before any bearer token; the browser withholds the answer from
// the page, but the request is carried out. And any page can have the
// browsers that open it send requests without a credential (images,
// fetch), each an authentication failure of the browser's address, and
// so lock everyone behind that address out (pigeon.Options.
// AuthFailureLimit).
//
// A browser says where a request comes from in Origin (sent with every
// request but a GET or HEAD in no-cors mode or a navigation) and
// Sec-Fetch-Site; a client that is not a browser sends neither and is
// never refused here. The server's own origin is the Host the request was
// sent to, or whatever the browser calls same-origin (behind a proxy that
// rewrites Host). A WebSocket upgrade of an endpoint that upgrades is left
// to the endpoint's own origin check (ws.Options.OriginPatterns); on any
// other path an Upgrade header exempts nothing, since a page can point the
// browser's WebSocket constructor at any route.
func (s *Server) crossSite(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	if site == "same-origin" || site == "none" || len(r.Header["Upgrade"]) > 0 && s.upgradesHere(r.URL.EscapedPath()) {
		return false
	}
	if r.Header.Get("Origin") != "" {
		return ws.CheckOrigin(r, s.opts.AllowedOrigins) != nil
	}
	if site != "cross-site" && site != "same-site" {
		return false // not a browser, or one that does not say
	}
	// A link followed from another site to a page of the server (the
	// console, the API page) is served; a frame, an image or a script of
	// another site's page is not.
	navigation := (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document"
	return !navigation
}

// upgradesHere reports whether path (escaped, as routed) is served by an
// endpoint that upgrades to a WebSocket and checks a browser's Origin
// itself, before any credential: /v1/ws, and mesgd's paths when it is
// served.
func (s *Server) upgradesHere(path string) bool {
	return path == "/v1/ws" || s.mesgd != nil && strings.HasPrefix(path, mesgd.Prefix+"/")
}
