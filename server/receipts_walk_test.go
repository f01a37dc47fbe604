package server_test

import (
	"context"
	"errors"
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

// TestReceiptsCheckedAgainBeforeTheAnswer: a walk of the audit
// log for receipts (GET /v1/audit/receipts/{id}) is read under the
// auditor role checked when the request came in, and may take seconds; a
// grant revoked, the role taken away or the account deleted while it
// walks answers the refusal, not the receipts.
func TestReceiptsCheckedAgainBeforeTheAnswer(t *testing.T) {
	for _, tc := range recheckCases() {
		t.Run(tc.name, func(t *testing.T) {
			res := readWhileRevoking(t, tc.revoke, func(*testing.T, *fixture) (string, string) {
				return http.MethodGet, "/v1/audit/receipts/msg_x"
			})
			if tc.name == "in force" {
				require.Equal(t, http.StatusOK, res.status, "%s", res.body)
				require.JSONEq(t, `{"receipts":[]}`, string(res.body))
				return
			}
			requireRefused(t, res, tc.code)
			require.NotContains(t, string(res.body), `"receipts"`)
		})
	}
}

// faultyWalks is a memory store whose next read of the audit log, once
// armed, says so and then, as fault says: waits for goOn (a client that
// goes away meanwhile), fails, or panics.
type faultyWalks struct {
	store.Store
	fault   string
	armed   atomic.Bool
	reading chan struct{}
	goOn    chan struct{}
}

func (s *faultyWalks) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	if s.armed.CompareAndSwap(true, false) {
		close(s.reading)
		switch s.fault {
		case "stall":
			<-s.goOn
		case "fail":
			return nil, errors.New("the disk is gone")
		case "panic":
			panic("the store panics")
		}
	}
	return s.Store.ReadAudit(ctx, from, limit)
}

// TestReceiptsWalkAlwaysGivesBack: a receipts request whose walk
// of the log ends other than with an answer (the client gone mid-walk,
// the store failing, the store panicking) gives back its walk slot and
// its room in the read pool: were one kept, maxLogWalks such requests
// would leave every later one RATE_LIMITED for as long as the server
// runs. Afterwards two walks at once are still answered.
func TestReceiptsWalkAlwaysGivesBack(t *testing.T) {
	for _, fault := range []string{"stall", "fail", "panic"} {
		t.Run(fault, func(t *testing.T) {
			st := &faultyWalks{Store: memory.New(nil), fault: fault, reading: make(chan struct{}), goOn: make(chan struct{})}
			e, err := pigeon.New(context.Background(), &pigeon.Options{
				Store:         st,
				Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
				Catalog:       testCatalog(),
				Region:        "uk",
			})
			require.NoError(t, err)
			s, hs := serve(t, e, nil)

			st.armed.Store(true)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/v1/audit/receipts/msg_x", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer auditor-token")
			done := make(chan error, 1)
			go func() {
				resp, err := hs.Client().Do(req)
				if err == nil {
					resp.Body.Close()
				}
				done <- err
			}()
			<-st.reading
			if fault == "stall" {
				cancel() // the client goes away while the walk waits on the store
				require.Error(t, <-done)
				close(st.goOn)
			} else {
				<-done
			}
			require.Eventually(t, func() bool {
				return server.LogWalksInUse(s) == 0 && s.ReadBytesInFlight() == 0
			}, 10*time.Second, time.Millisecond, "walks held %d, read bytes held %d", server.LogWalksInUse(s), s.ReadBytesInFlight())

			f := &fixture{e: e, s: s, hs: hs}
			release := server.HoldLogWalks(s) // every slot is free to take
			release()
			r := f.do(t, http.MethodGet, "/v1/audit/receipts/msg_x", "auditor-token", "")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		})
	}
}
