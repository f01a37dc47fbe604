package pigeon_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/wal"
)

// heldWriteStore holds the next write of a contract that is not revoked
// until release is closed, once armed: a renewal's write caught between
// reading the contract and storing it.
type heldWriteStore struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *heldWriteStore) PutContract(ctx context.Context, c store.ContractRecord) error {
	if !c.Revoked && s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
	}
	return s.Store.PutContract(ctx, c)
}

// A renewal whose write of the contract lands after a revocation's does
// not store the contract unrevoked: after a restart the contract is still
// revoked. Before, the renewal wrote the record it had read before the
// revocation, and the restarted broker honoured the revoked contract until
// its (renewed) expiry.
func TestContractRevokedDuringARenewalStaysRevoked(t *testing.T) {
	cases := []struct {
		name string
		use  func(e *pigeon.Engine, p *pigeon.Principal, id string) error
	}{
		{"publish", func(e *pigeon.Engine, p *pigeon.Principal, id string) error {
			_, err := e.Publish(ctx, pigeon.Caller{Principal: p, Region: "uk", ContractID: id}, demo.Payment("o-1"))
			return err
		}},
		{"renew", func(e *pigeon.Engine, p *pigeon.Principal, id string) error {
			_, err := e.RenewContract(ctx, p, id, time.Hour)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st, err := wal.Open(dir, nil)
			require.NoError(t, err)
			held := &heldWriteStore{Store: st, entered: make(chan struct{}), release: make(chan struct{})}
			e, err := pigeon.New(ctx, &pigeon.Options{Store: held, Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk"})
			require.NoError(t, err)
			p, err := e.Authenticate(ctx, "checkout-token")
			require.NoError(t, err)
			c, err := e.Negotiate(ctx, p, "", []string{"payments.authorize"}, time.Minute)
			require.NoError(t, err)

			held.armed.Store(true)
			renewed := make(chan error, 1)
			go func() { _, err := e.RenewContract(ctx, p, c.ID(), time.Hour); renewed <- err }()
			<-held.entered
			revoked := make(chan error, 1)
			go func() { revoked <- e.RevokeContract(ctx, p, c.ID()) }()
			// The revocation may wait for the renewal's write; either way
			// the renewal's write is let go after the revocation began.
			select {
			case err := <-revoked:
				require.NoError(t, err)
				revoked <- nil
			case <-time.After(200 * time.Millisecond):
			}
			close(held.release)
			if err := <-renewed; err != nil {
				requireCode(t, err, pigeon.CodeContractRevoked)
			}
			require.NoError(t, <-revoked)

			require.NoError(t, e.Shutdown(ctx))
			require.NoError(t, st.Close(ctx))
			e, st = openDurable(t, dir, nil)
			defer closeDurable(t, e, st)
			p, err = e.Authenticate(ctx, "checkout-token")
			require.NoError(t, err)
			requireCode(t, tc.use(e, p, c.ID()), pigeon.CodeContractRevoked)
		})
	}
}
