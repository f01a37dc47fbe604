package server

import (
	"context"
	"net/http"

	"pigeon"
	"pigeon/internal/wire"
)

// RoleAuditor is the role that reads the audit log and the quarantine and
// releases quarantined messages.
const RoleAuditor = pigeon.RoleAuditor

type ctxKey int

const (
	principalKey ctxKey = iota
	regionKey
)

// PrincipalFrom returns the authenticated principal of a request served
// behind the server's authentication (API routes and mounted handlers), or
// nil.
func PrincipalFrom(ctx context.Context) *pigeon.Principal {
	p, _ := ctx.Value(principalKey).(*pigeon.Principal)
	return p
}

// RegionFrom returns the region of a request served behind the server's
// authentication: its x-pigeon-region header, or the server's default.
func RegionFrom(ctx context.Context) string {
	r, _ := ctx.Value(regionKey).(string)
	return r
}

// bearer returns the token of an Authorization: Bearer header.
func bearer(r *http.Request) string {
	return wire.Bearer(r.Header.Get("Authorization"))
}

// authenticate resolves the request's credential and region. A request
// that repeats a header of wire.OnceHeaders is BAD_REQUEST.
func (s *Server) authenticate(r *http.Request) (*pigeon.Principal, string, error) {
	if err := wire.CheckOnce(r, wire.OnceHeaders...); err != nil {
		return nil, "", err
	}
	p, err := s.e.AuthenticateCredential(r.Context(), wire.Credential(r, bearer(r)))
	if err != nil {
		return nil, "", err
	}
	region := r.Header.Get("X-Pigeon-Region")
	if region == "" {
		region = s.opts.Region
	}
	if err := pigeon.CheckRegion(region); err != nil {
		return nil, "", err
	}
	return p, region, nil
}

// unauthorized answers an authentication failure.
func unauthorized(w http.ResponseWriter, err error) {
	if pigeon.ErrorCode(err) == pigeon.CodeUnauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pigeon"`)
	}
	writeError(w, err)
}

// authenticated wraps h: the request must carry a valid bearer token, and
// h finds the principal and region in the request context.
func (s *Server) authenticated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, region, err := s.authenticate(r)
		if err != nil {
			unauthorized(w, err)
			return
		}
		ctx := context.WithValue(context.WithValue(r.Context(), principalKey, p), regionKey, region)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}
