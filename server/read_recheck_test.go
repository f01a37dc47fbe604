package server_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/wire"
	"pigeon/store"
	"pigeon/store/memory"
)

// stallingReads is a memory store whose next read of the audit log or
// the quarantine (a page or one record), once armed, says so on reading and waits for goOn: a
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

func (s *stallingReads) GetQuarantine(ctx context.Context, id string) (store.QuarantineRecord, error) {
	s.stall()
	return s.Store.GetQuarantine(ctx, id)
}

func (s *stallingReads) ListQuarantine(ctx context.Context, since time.Time, max int) ([]store.QuarantineRecord, error) {
	s.stall()
	return s.Store.ListQuarantine(ctx, since, max)
}

// TestRoleReadsCheckedAgainBeforeTheAnswer: a page of the audit log or of
// the quarantine is read under the auditor role checked when the request
// came in; a grant revoked, the role taken away or the account deleted
// while the read waits answers the refusal, not the page.
func TestRoleReadsCheckedAgainBeforeTheAnswer(t *testing.T) {
	for _, path := range []string{"/v1/audit", "/v1/quarantine"} {
		for _, tc := range recheckCases() {
			t.Run(path+" "+tc.name, func(t *testing.T) {
				res := readWhileRevoking(t, tc.revoke, func(*testing.T, *fixture) (string, string) { return http.MethodGet, path })
				if tc.name == "in force" {
					require.Equal(t, http.StatusOK, res.status, "%s", res.body)
					require.Contains(t, string(res.body), `"records"`)
					return
				}
				requireRefused(t, res, tc.code)
				require.NotContains(t, string(res.body), `"records"`)
			})
		}
	}
}

// recheckCases are auditorRevocations after the case of a grant in force.
func recheckCases() []struct {
	name   string
	revoke func(t *testing.T, f *fixture, account, jti string)
	code   pigeon.Code
} {
	return append([]struct {
		name   string
		revoke func(t *testing.T, f *fixture, account, jti string)
		code   pigeon.Code
	}{{"in force", func(*testing.T, *fixture, string, string) {}, ""}}, auditorRevocations...)
}

// readWhileRevoking serves a broker on a stallingReads store, gives the
// account ops-reader an auditor grant, and makes the request prepare names
// with it (prepare may set the broker up first); while the request's read
// of the store waits, revoke runs. It returns the answer.
func readWhileRevoking(t *testing.T, revoke func(t *testing.T, f *fixture, account, jti string),
	prepare func(t *testing.T, f *fixture) (method, path string)) response {
	t.Helper()
	f, st := stallingServer(t)
	const account = "ops-reader"
	token, jti := f.auditorGrant(t, account)
	method, path := prepare(t, f)

	st.armed.Store(true)
	done := make(chan response, 1)
	go func() { done <- f.do(t, method, path, token, "") }()
	<-st.reading
	revoke(t, f, account, jti)
	close(st.goOn)
	return <-done
}

// stallingServer serves a broker on a stallingReads store (not armed).
func stallingServer(t *testing.T) (*fixture, *stallingReads) {
	t.Helper()
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
	return f, st
}

// requireRefused asserts res is a refusal, of code when it is not empty.
func requireRefused(t *testing.T, res response, code pigeon.Code) {
	t.Helper()
	require.GreaterOrEqual(t, res.status, 400, "%s", res.body)
	if code != "" {
		require.Equal(t, code, res.code(t))
		require.Equal(t, wire.HTTPStatus(code), res.status)
	}
}

// TestRoleReadsOfTheStoreCheckedAgain: one quarantine record (its
// principal, subject and redacted message) and a verification of the
// audit log are read under the auditor role too, from the store, which
// may wait (a disk, a cluster's quorum; a verification waits for a walk
// of the whole log). A grant revoked, the role taken away or the account
// deleted meanwhile answers the refusal, not the record or the result.
func TestRoleReadsOfTheStoreCheckedAgain(t *testing.T) {
	for _, route := range []struct{ method, path string }{
		{http.MethodGet, "/v1/quarantine/{id}"},
		{http.MethodPost, "/v1/audit/verify"},
	} {
		for _, tc := range recheckCases() {
			t.Run(route.method+" "+route.path+" "+tc.name, func(t *testing.T) {
				var qid string
				res := readWhileRevoking(t, tc.revoke, func(t *testing.T, f *fixture) (string, string) {
					pay := f.contract(t, "checkout-token", "payments.authorize")
					m := demo.Payment("o-9")
					m.Data = []byte(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"t","card":{"pan":"4111111111111111"}}`)
					r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", msgBody(t, m), "x-pigeon-contract", pay)
					require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s", r.body)
					qid = r.json(t)["error"].(map[string]any)["details"].(map[string]any)["quarantineId"].(string)
					return route.method, strings.Replace(route.path, "{id}", qid, 1)
				})
				if tc.name == "in force" {
					require.Equal(t, http.StatusOK, res.status, "%s", res.body)
					return
				}
				requireRefused(t, res, tc.code)
				require.NotContains(t, string(res.body), qid)
				require.NotContains(t, string(res.body), `"verified"`)
			})
		}
	}
}

// TestConsoleStateCheckedAgainAfterItsRead: the console stream's state
// event (quarantine count, live contracts, groups) is read from the store,
// which may wait for up to two seconds. A grant revoked, the auditor role
// taken away or the account deleted while the read waits ends the stream
// with its end event; the state read under the old grant is not sent.
func TestConsoleStateCheckedAgainAfterItsRead(t *testing.T) {
	for _, tc := range auditorRevocations {
		t.Run(tc.name, func(t *testing.T) {
			f, st := stallingServer(t)
			const account = "ops-console"
			token, jti := f.auditorGrant(t, account)

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			st.armed.Store(true) // the stream's first state read waits
			res, events := f.openEvents(t, ctx, token)
			require.Equal(t, http.StatusOK, res.StatusCode)
			<-st.reading
			tc.revoke(t, f, account, jti)
			close(st.goOn)

			deadline := time.After(10 * time.Second)
			for {
				select {
				case ev, ok := <-events:
					require.True(t, ok, "the stream closed without an end event")
					require.NotEqual(t, "state", ev.name, "the state read under the revoked grant was sent")
					if ev.name == "end" {
						return
					}
				case <-deadline:
					t.Fatal("the stream went on after the revocation")
				}
			}
		})
	}
}
