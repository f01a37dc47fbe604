package server

import (
	"net/http"
	"net/url"
	"path"
	"strings"
)

// corsAllowHeaders are the request headers a browser page on an allowed
// origin may send: the bearer credential, the contract and region of a
// call, a JSON body and a request id.
const corsAllowHeaders = "Authorization, Content-Type, X-Pigeon-Contract, X-Pigeon-Region, X-Request-Id"

// corsAllowMethods are the methods of the API's routes.
const corsAllowMethods = "GET, POST, PUT, DELETE"

// allowedOrigin reports whether a browser page of origin (the Origin
// header) may call the API: patterns are matched as the WebSocket
// endpoint matches its OriginPatterns, against the origin's host (with
// its port), or against scheme://host when the pattern names a scheme;
// case does not matter.
func allowedOrigin(patterns []string, origin string) bool {
	if len(patterns) == 0 || origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, err := path.Match(strings.ToLower(p), strings.ToLower(target)); err == nil && ok {
			return true
		}
	}
	return false
}

// cors answers what a browser asks of a cross-origin call from an
// allowed origin: the Access-Control headers on every answer, and a
// preflight (OPTIONS with Access-Control-Request-Method) answered 204
// here. It reports whether the request was a preflight it answered. An
// origin that is not allowed gets no Access-Control headers, so the
// browser withholds the answer; the request itself is served as any other
// (its credential decides what it may do).
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || !allowedOrigin(s.opts.AllowedOrigins, origin) {
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
