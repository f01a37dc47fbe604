package server_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
	"pigeon/store"
	"pigeon/store/memory"
)

// stallingReads is a memory store whose next read of the audit log or
// the quarantine, once armed, says so on reading and waits for goOn: a
// read that waits (on the disk, or for room in the read pool).
type stallingReads struct {
	store.Store
	armed   atomic.Bool
	reading chan struct{}
	goOn    chan struct{}
}

func (s *stallingReads) stall() {
	if s.armed.CompareAndSwap(true, false) {
		close(s.reading)
		<-s.goOn
	}
}

func (s *stallingReads) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	s.stall()
	return s.Store.ReadAudit(ctx, from, limit)
}

func (s *stallingReads) ListQuarantine(ctx context.Context, since time.Time, max int) ([]store.QuarantineRecord, error) {
	s.stall()
	return s.Store.ListQuarantine(ctx, since, max)
}

// TestRoleReadsCheckedAgainBeforeTheAnswer: a page of the audit log or of
// the quarantine is read under the auditor role checked when the request
// came in; a grant revoked or the role taken away while the read waits
// answers the refusal, not the page, and is audited.
func TestRoleReadsCheckedAgainBeforeTheAnswer(t *testing.T) {
	for _, path := range []string{"/v1/audit", "/v1/quarantine"} {
		for _, tc := range []struct {
			name   string
			revoke func(t *testing.T, f *fixture, account, jti string)
			status int
			code   pigeon.Code
		}{
			{"in force", func(*testing.T, *fixture, string, string) {}, http.StatusOK, ""},
			{"grant revoked", func(t *testing.T, f *fixture, _, jti string) {
				require.Equal(t, http.StatusOK, f.do(t, http.MethodDelete, "/v1/grants/"+jti, "admin-token", "").status)
			}, http.StatusUnauthorized, pigeon.CodeUnauthenticated},
			{"role taken away", func(t *testing.T, f *fixture, account, _ string) {
				r := f.do(t, http.MethodDelete, "/v1/accounts/"+account+"/roles/"+server.RoleAuditor, "admin-token", "")
				require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			}, http.StatusForbidden, pigeon.CodeForbidden},
		} {
			t.Run(path+" "+tc.name, func(t *testing.T) {
				st := &stallingReads{Store: memory.New(nil), reading: make(chan struct{}), goOn: make(chan struct{})}
				e, err := pigeon.New(context.Background(), &pigeon.Options{
					Store:         st,
					Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
					Catalog:       testCatalog(),
					Region:        "uk",
				})
				require.NoError(t, err)
				s, hs := serve(t, e, nil)
				f := &fixture{e: e, s: s, hs: hs}
				const account = "ops-reader"
				r := f.do(t, http.MethodPost, "/v1/accounts", "admin-token", `{"id":"`+account+`"}`)
				require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
				r = f.do(t, http.MethodPut, "/v1/accounts/"+account+"/roles/"+server.RoleAuditor, "admin-token", "")
				require.Equal(t, http.StatusOK, r.status, "%s", r.body)
				r = f.do(t, http.MethodPost, "/v1/grants", "admin-token", `{"account":"`+account+`","roles":["`+server.RoleAuditor+`"],"ttlMs":600000}`)
				require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
				g := r.json(t)

				st.armed.Store(true)
				done := make(chan response, 1)
				go func() { done <- f.do(t, http.MethodGet, path, g["token"].(string), "") }()
				<-st.reading
				tc.revoke(t, f, account, g["jti"].(string))
				close(st.goOn)
				res := <-done
				require.Equal(t, tc.status, res.status, "%s", res.body)
				if tc.code == "" {
					require.Contains(t, string(res.body), `"records"`)
					return
				}
				require.Equal(t, tc.code, res.code(t))
				require.NotContains(t, string(res.body), `"records"`)
			})
		}
	}
}
